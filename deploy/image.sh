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
# The image runs as user 65534, carries OCI labels (source, version from
# version.go, licence), and starts with no arguments: built-in
# example rules, no store, HTTP on :8080 (/healthz, /readyz, /metrics).
set -eu
# image.sh ringlimitd TAG builds ringlimitd's image instead (see
# deploy/ringlimitd/image.sh).
if [ $# -eq 2 ] && [ "$1" = ringlimitd ]; then
	exec sh "$(dirname "$0")/ringlimitd/image.sh" "$2"
fi
if [ $# -ne 1 ] || [ -z "$1" ]; then
	echo "usage: $0 TAG | $0 ringlimitd TAG" >&2
	exit 2
fi
tag=$1
root=$(cd "$(dirname "$0")/.." && pwd)
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT INT TERM

# The image's version label: the module's, from version.go.
version=$(sed -n 's/^const Version = "\(.*\)"$/\1/p' "$root/version.go")

# -trimpath: no path of this machine (checkout, module cache, Go root) in
# the binary. Its compile cache is apart from go test's, so the first build
# compiles every dependency (minutes on 2 cores); later ones reuse it.
(cd "$root" && CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags='-s -w' \
	-o "$ctx/ringlimit-example" ./deploy/kubernetes)
cat >"$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
ARG VERSION=unknown
LABEL org.opencontainers.image.title=ringlimit-example \
	org.opencontainers.image.source=https://github.com/ringlimit/ringlimit \
	org.opencontainers.image.version=$VERSION \
	org.opencontainers.image.licenses=Apache-2.0
COPY ringlimit-example /ringlimit-example
USER 65534:65534
EXPOSE 8080/tcp 7946/tcp 7946/udp 7947/tcp
ENTRYPOINT ["/ringlimit-example"]
DOCKERFILE
docker build --quiet --build-arg VERSION="$version" --tag "$tag" "$ctx" >/dev/null
echo "$tag"
