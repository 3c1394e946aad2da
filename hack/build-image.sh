#!/usr/bin/env bash
# Builds the manager's container image with podman and prints its image ID
# on the last line.
#   IMAGE    the tag (default localhost/subnet-operator:dev)
#   VERSION  stamped into the binary and the image's labels (default dev)
# The same source gives the same image ID: see the Dockerfile. Podman and
# runc come from the distribution's packages when they are missing (as root,
# with apt-get: the build and test machines are Debian).
set -euo pipefail
cd "$(dirname "$0")/.."
image=${IMAGE:-localhost/subnet-operator:dev}
version=${VERSION:-dev}
bin=${LOCALBIN:-$PWD/bin}

if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "podman and runc are needed to build the image: install them (Debian: apt-get install podman runc)" >&2
    exit 1
  fi
  echo "Installing podman and runc from the Debian packages (once)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends podman runc >&2 ||
    { apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends podman runc >&2; }
fi

# The build context is the binary alone, in a directory of this build's own
# (test packages build in parallel).
mkdir -p "$bin"
ctx=$(mktemp -d "$bin/image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath \
  -ldflags "-s -w -buildid= -X main.version=$version" -o "$ctx/manager" ./cmd/manager
# runc, not the default crun: crun fails on these machines' hybrid cgroups.
podman --runtime runc build --quiet --timestamp 0 --file "$PWD/Dockerfile" \
  --label "org.opencontainers.image.title=subnet-operator" \
  --label "org.opencontainers.image.version=$version" \
  --tag "$image" "$ctx" >/dev/null
podman image inspect --format '{{.Id}}' "$image"
