#!/bin/sh
# store-image.sh TAG builds an image of a store for the container quick
# start (docs/containers.md) with no image registry: this machine's
# valkey-server, else redis-server (Debian: apt-get install redis-server;
# Redis 7 speaks Valkey's protocol and Lua), with the libraries it links,
# FROM scratch. Where images can be pulled, valkey/valkey:8.0.2 does the
# same job.
#
#   deploy/store-image.sh ringlimit-store:local
#
# The image runs as user 65534 on port 6379 (of its own network namespace)
# with no persistence and no password: for a private Docker network only.
set -eu
if [ $# -ne 1 ] || [ -z "$1" ]; then
	echo "usage: $0 TAG" >&2
	exit 2
fi
tag=$1
server=$(command -v valkey-server || command -v redis-server || true)
if [ -z "$server" ]; then
	echo "$0: no valkey-server or redis-server here (Debian: apt-get install redis-server)" >&2
	exit 1
fi
# Not resolved: redis-server is a link to redis-check-rdb, and the name
# it runs under picks what it does. cp -L copies the file under this name.
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT INT TERM

# The server and every library ldd names (the loader included), at their
# paths.
mkdir -p "$ctx/root"
for f in "$server" $(ldd "$server" | grep -o '/[^ ]*'); do
	mkdir -p "$ctx/root$(dirname "$f")"
	cp -L "$f" "$ctx/root$f"
done
cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM scratch
COPY root/ /
USER 65534:65534
EXPOSE 6379/tcp
ENTRYPOINT ["$server", "--save", "", "--appendonly", "no", "--protected-mode", "no", "--port", "6379"]
DOCKERFILE
docker build --quiet --tag "$tag" "$ctx" >/dev/null
echo "$tag"
