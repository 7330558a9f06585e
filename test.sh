#!/usr/bin/env bash
# The test command: vet and race-test everything, against a real Valkey or
# Redis server that the tests start themselves on free loopback ports.
# On a machine with neither server, it installs Debian's redis-server (as root,
# or through sudo).
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v valkey-server >/dev/null && ! command -v redis-server >/dev/null; then
	echo "test.sh: no valkey-server or redis-server on PATH; installing redis-server" >&2
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
	# The package starts a system service on 6379; the tests never use it.
	$sudo systemctl disable --now redis-server >/dev/null 2>&1 || $sudo service redis-server stop >/dev/null 2>&1 || true
fi

# The alert rules' unit tests (deploy/prometheus) run promtool, from Debian's
# prometheus package; they skip only where it cannot be installed. The package
# starts a Prometheus service, which the tests never use: it is stopped.
if ! command -v promtool >/dev/null; then
	echo "test.sh: no promtool on PATH; installing Debian's prometheus for the alert rules' tests" >&2
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	if { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq prometheus >/dev/null; }; then
		$sudo systemctl disable --now prometheus >/dev/null 2>&1 || $sudo service prometheus stop >/dev/null 2>&1 || true
	else
		echo "test.sh: could not install prometheus; the promtool tests will skip" >&2
	fi
fi

# The dashboard's browser test drives Debian's chromium; it skips only where
# no chromium can be found.
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && ! command -v google-chrome >/dev/null; then
	echo "test.sh: no chromium on PATH; installing Debian's chromium for the dashboard's browser test" >&2
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null; }; then
		echo "test.sh: could not install chromium; the browser test will skip" >&2
	fi
fi

go vet ./...
# grpclimit is a module of its own (so that the core never imports grpc):
# vetted and tested here too, from its folder.
(cd grpclimit && go vet ./...)
# Every Go file, grpclimit's and bench's included, is gofmt'ed.
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "test.sh: not gofmt'ed:" >&2
	echo "$unformatted" >&2
	exit 1
fi

# test/netchaos runs node containers on a private Docker network and injects
# faults with iptables (and an NFQUEUE queue) in their network namespaces, so its
# container scenarios need a Docker daemon and root; without them they skip,
# saying why (its in-process clock-skew test runs anyway). It runs after the
# other packages, so that it does not share the 2 cores with test/chaos.
netchaos=(go test -race -count=1 -timeout 25m "$@" ./test/netchaos/)
if docker info >/dev/null 2>&1; then
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then
		if sudo -n true 2>/dev/null; then
			# Root for nsenter and iptables; its own build cache, so that the
			# user's stays the user's.
			sudo="sudo -n env PATH=$PATH GOMODCACHE=$(go env GOMODCACHE) GOCACHE=${TMPDIR:-/tmp}/ringlimit-netchaos-gocache"
		else
			echo "test.sh: a Docker daemon answers but this is not root and sudo asks for a password: test/netchaos's container scenarios will skip" >&2
		fi
	fi
	updated=""
	for tool in nsenter:util-linux iptables:iptables; do
		if ! command -v "${tool%%:*}" >/dev/null; then
			echo "test.sh: installing ${tool##*:} for test/netchaos" >&2
			[ -n "$updated" ] || { ${sudo:+sudo -n} apt-get update -qq || true; updated=1; }
			DEBIAN_FRONTEND=noninteractive ${sudo:+sudo -n} apt-get install -y -qq "${tool##*:}" >/dev/null || echo "test.sh: could not install ${tool##*:}; test/netchaos's container scenarios will skip" >&2
		fi
	done
	echo "test.sh: a Docker daemon answers: test/netchaos runs its container scenarios and its CPU-quota runs (about 8 minutes)" >&2
	netchaos=($sudo "${netchaos[@]}")
else
	echo "test.sh: no Docker daemon answers: test/netchaos's container scenarios SKIP (only its in-process clock-skew test runs)" >&2
fi

go test -race -count=1 "$@" $(go list ./... | grep -v '/test/netchaos$')
(cd grpclimit && go test -race -count=1 "$@" ./...)
"${netchaos[@]}"
