#!/bin/sh
# image.sh TAG builds the image of the example service (deploy/kubernetes)
# on a machine with Docker and Go but no image registry: the binary is built
# here, static (CGO_ENABLED=0), and copied into an image FROM scratch, so
# nothing is pulled. Builders with a registry may use
# deploy/kubernetes/Dockerfile instead; both make the same image.
#
#   deploy/image.sh ringlimit-example:v1
#
# GOARCH in the environment picks another architecture (default: this one).
# The image runs as user 65534 and starts with no arguments: built-in
# example rules, no store, HTTP on :8080 (/healthz, /readyz, /metrics).
set -eu
if [ $# -ne 1 ] || [ -z "$1" ]; then
	echo "usage: $0 TAG" >&2
	exit 2
fi
tag=$1
root=$(cd "$(dirname "$0")/.." && pwd)
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT INT TERM

# No -trimpath: the build then shares the compile cache of go build and
# go test (a cold build of every dependency takes minutes on 2 cores).
(cd "$root" && CGO_ENABLED=0 GOOS=linux go build -ldflags='-s -w' \
	-o "$ctx/ringlimit-example" ./deploy/kubernetes)
cat >"$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY ringlimit-example /ringlimit-example
USER 65534:65534
EXPOSE 8080/tcp 7946/tcp 7946/udp 7947/tcp
ENTRYPOINT ["/ringlimit-example"]
DOCKERFILE
docker build --quiet --tag "$tag" "$ctx" >/dev/null
echo "$tag"
