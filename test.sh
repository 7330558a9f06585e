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
go test -race -count=1 "$@" ./...
