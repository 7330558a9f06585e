#!/bin/sh
# image.sh TAG builds ringlimitd's image (deploy/image.sh ringlimitd TAG
# calls it) on a machine with Docker and Go but no image registry: the
# binary is built here, static (CGO_ENABLED=0), from the ringlimitd module
# in this workspace, and copied into an image FROM scratch, so nothing is
# pulled.
#
#   deploy/image.sh ringlimitd ringlimitd:0.1.0
#
# GOARCH in the environment picks another architecture. The image runs as
# user 65534 and starts with no arguments: a lone node with an empty
# config, gRPC on :8081, HTTP on :8080 (/json, /healthz, /readyz, /metrics).
set -eu
if [ $# -ne 1 ] || [ -z "$1" ]; then
	echo "usage: $0 TAG" >&2
	exit 2
fi
tag=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT INT TERM

# -trimpath: no path of this machine in the binary (as deploy/image.sh).
(cd "$root/ringlimitd" && CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags='-s -w' -o "$ctx/ringlimitd" .)
version=$(sed -n 's/^const Version = "\(.*\)"$/\1/p' "$root/version.go")
cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM scratch
COPY ringlimitd /ringlimitd
USER 65534:65534
EXPOSE 8081/tcp 8080/tcp 7946/tcp 7946/udp 7947/tcp
LABEL org.opencontainers.image.title="ringlimitd" \\
	org.opencontainers.image.version="$version" \\
	org.opencontainers.image.source="https://github.com/ringlimit/ringlimit" \\
	org.opencontainers.image.licenses="Apache-2.0"
ENTRYPOINT ["/ringlimitd"]
DOCKERFILE
docker build --quiet --tag "$tag" "$ctx" >/dev/null
echo "$tag"
