#!/bin/sh
# build.sh — the container images, from static binaries built on this host
# (CGO_ENABLED=0, -trimpath) and COPY'd into FROM scratch images: nothing is
# pulled from a registry.
#
#   deploy/docker/build.sh            from anywhere; needs go and docker
#
# Tags (override with TCKCLK_TAG, default dev):
#   tckclk/agent:$TCKCLK_TAG     tckclk-agent, with ticketctl as its health probe
#   tckclk/ticketd:$TCKCLK_TAG   ticketd and ticketctl
# Exit 0 on success, 1 when a build fails.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tag=${TCKCLK_TAG:-dev}
ctx=$(mktemp -d "${TMPDIR:-/tmp}/tckclk-images.XXXXXX")
trap 'rm -rf "$ctx"' EXIT

echo "build.sh: static binaries into $ctx"
rev=$(git -C "$root" rev-parse HEAD 2>/dev/null || true)
(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X github.com/tckclk/tckclk/internal/version.Revision=$rev" -o "$ctx/" \
	./cmd/ticketd ./cmd/ticketctl ./cmd/tckclk-agent) || { echo "build.sh: go build failed" >&2; exit 1; }
mkdir "$ctx/empty"
cp "$here/ticketd.Dockerfile" "$here/agent.Dockerfile" "$ctx/"
for image in agent ticketd; do
	# The engine's legacy builder (no buildx here) warns that it is
	# deprecated on every build: its output is shown only on failure.
	docker build -q -f "$ctx/$image.Dockerfile" -t "tckclk/$image:$tag" "$ctx" >"$ctx/log" 2>&1 || {
		cat "$ctx/log" >&2
		echo "build.sh: docker build of tckclk/$image:$tag failed" >&2
		exit 1
	}
done
echo "build.sh: built tckclk/agent:$tag and tckclk/ticketd:$tag"
