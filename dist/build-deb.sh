#!/bin/bash
# Builds gpushare_<version>_<arch>.deb from this checkout with the cargo on
# PATH (rustup). Usage: dist/build-deb.sh [OUTDIR] (default target/debian).
# Set LINTIAN=1 to run lintian on the result; it fails on lintian errors.
# The cargo target directory of the checkout is reused (CARGO_TARGET_DIR).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$repo/target/debian}" && cd "${1:-$repo/target/debian}" && pwd)
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"

for tool in cargo dpkg-buildpackage dh; do
    command -v "$tool" >/dev/null || {
        echo "build-deb: $tool is missing (apt-get install debhelper dpkg-dev; cargo from rustup)" >&2
        exit 1
    }
done

cargo_version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$repo/Cargo.toml")
deb_version=$(dpkg-parsechangelog -l "$repo/dist/debian/changelog" -S Version)
if [ "$cargo_version" != "$deb_version" ]; then
    echo "build-deb: Cargo.toml says version $cargo_version but dist/debian/changelog says" \
         "$deb_version; add a changelog entry (dch -c dist/debian/changelog -v $cargo_version)" >&2
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src="$work/gpushare-$deb_version"
mkdir "$src"
# The working tree as it is (uncommitted changes included), without build output:
# in a git checkout the files git does not ignore, else everything but target/.
if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
        tar --null -T - -cf -) | tar -C "$src" -xf -
else
    tar -C "$repo" --exclude=./target --exclude=./.git --exclude=./debian -cf - . | tar -C "$src" -xf -
fi
rm -rf "$src/debian"
cp -a "$repo/dist/debian" "$src/debian"

(cd "$src" && DEB_BUILD_OPTIONS="nocheck ${DEB_BUILD_OPTIONS-}" dpkg-buildpackage -b -us -uc)

arch=$(dpkg-architecture -qDEB_HOST_ARCH)
deb="gpushare_${deb_version}_${arch}.deb"
cp "$work/$deb" "$out/"
cp "$work/gpushare_${deb_version}_${arch}.changes" "$out/" 2>/dev/null || true
echo "build-deb: $out/$deb"

if [ "${LINTIAN-0}" = 1 ]; then
    # --fail-on error: warnings are reported but do not fail the build.
    lintian --fail-on error "$out/$deb"
fi
