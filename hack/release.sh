#!/usr/bin/env bash
# Builds a release into DIST (default dist/):
#   install.yaml                   config/default in one file, the image by digest
#   subnet-operator-<v>.tgz        the Helm chart, its image pinned by the same digest
#   subnet-operator-image-<V>.tar  the image as an OCI archive, gzip layers:
#                                  the bytes whose manifest digest install.yaml names
#   kubectl-ipam_<V>_<os>_<arch>.tar.gz  the kubectl plugin, for linux and darwin, amd64 and arm64
#   ipam.yaml                      the plugin's krew manifest (hack/krew/ipam.yaml, filled in)
#   checksums.txt                  SHA-256 of each
# Usage: VERSION=v0.2.0 hack/release.sh   (make release VERSION=v0.2.0)
# Publishing copies the archive to the registry with its digest unchanged:
#   skopeo copy --preserve-digests oci-archive:<tar> docker://$IMAGE_REPO:<V>
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
: "${VERSION:?set VERSION, e.g. VERSION=v0.2.0}"
if ! [[ $VERSION =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "VERSION must look like v1.2.3 (or v1.2.3-rc.1), not $VERSION" >&2
  exit 1
fi
repo=${IMAGE_REPO:-ghcr.io/subnet-operator/subnet-operator}
dist=${DIST:-$root/dist}
assets=${ASSETS:-$root/bin/assets}

IMAGE=$repo:$VERSION VERSION=$VERSION hack/build-image.sh >/dev/null
rm -rf "$dist" && mkdir -p "$dist"
archive=subnet-operator-image-$VERSION.tar
# The layers compressed as a registry stores them: the manifest digest is
# then the one a registry serves, and it is the same for the same source.
podman push --quiet --compression-format gzip --digestfile "$dist/.digest" \
  "$repo:$VERSION" "oci-archive:$dist/$archive:$repo:$VERSION"
digest=$(cat "$dist/.digest")
rm "$dist/.digest"

# config/default with the image by digest, rendered from an overlay that
# lives only for this.
overlay=$(mktemp -d "$root/config/.release-XXXXXX")
trap 'rm -rf "$overlay"' EXIT
cat >"$overlay/kustomization.yaml" <<YAML
resources:
- ../default
images:
- name: ghcr.io/subnet-operator/subnet-operator
  newName: $repo
  digest: $digest
YAML
"$assets/kubectl" kustomize "$overlay" >"$dist/install.yaml"
grep -q "image: $repo@$digest" "$dist/install.yaml" ||
  { echo "install.yaml does not name the image by digest" >&2; exit 1; }

# The chart, its appVersion the release and its image the same digest.
chart=$overlay/chart
cp -r charts/subnet-operator "$chart"
sed -i "s|^  digest: \"\"|  digest: \"$digest\"|; s|^  repository: .*|  repository: $repo|" "$chart/values.yaml"
grep -q "^  digest: \"$digest\"" "$chart/values.yaml" ||
  { echo "could not pin the chart's image.digest" >&2; exit 1; }
"$assets/helm" package "$chart" --version "${VERSION#v}" --app-version "$VERSION" --destination "$dist" >/dev/null

# The kubectl plugin: a static binary per platform, archived as krew wants
# (tar.gz), and the krew manifest naming each archive's SHA-256.
release_url=${RELEASE_URL:-https://github.com/subnet-operator/subnet-operator/releases/download/$VERSION}
plugin=$overlay/plugin
manifest=$(sed "s|VERSION|$VERSION|g; s|URL|$release_url|g" hack/krew/ipam.yaml)
for platform in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do
  os=${platform%/*} arch=${platform#*/}
  mkdir -p "$plugin/$os-$arch"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "-s -w" -o "$plugin/$os-$arch/kubectl-ipam" ./cmd/kubectl-ipam
  tgz=kubectl-ipam_${VERSION}_${os}_${arch}.tar.gz
  tar -C "$plugin/$os-$arch" --owner=0 --group=0 --mtime=@0 -czf "$dist/$tgz" kubectl-ipam
  sum=$(sha256sum "$dist/$tgz" | cut -d' ' -f1)
  manifest=${manifest//SHA256_${os}_${arch}/$sum}
done
printf '%s\n' "$manifest" >"$dist/ipam.yaml"

(cd "$dist" && sha256sum install.yaml "$archive" subnet-operator-*.tgz kubectl-ipam_*.tar.gz ipam.yaml >checksums.txt)
echo "Release $VERSION in $dist: image $repo@$digest"
ls -l "$dist"
