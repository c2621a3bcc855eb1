#!/bin/bash
# Renders every man page of the package with groff's warnings on and fails on
# any warning: the hand-written pages in man/ and the generated ones, if built,
# in $CARGO_TARGET_DIR/man (default target/man). Usage: check-man.sh [PAGE...]
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
command -v man >/dev/null || { echo "check-man: man is missing (apt-get install man-db)" >&2; exit 1; }

if [ $# -gt 0 ]; then
    pages=("$@")
else
    shopt -s nullglob
    pages=("$repo"/man/*.[1-8] "${CARGO_TARGET_DIR:-$repo/target}"/man/*.[1-8])
fi
[ ${#pages[@]} -gt 0 ] || { echo "check-man: no pages found" >&2; exit 1; }

bad=0
for page in "${pages[@]}"; do
    warnings=$(MANWIDTH=80 LC_ALL=C.UTF-8 man --warnings -l "$page" 2>&1 >/dev/null)
    if [ -n "$warnings" ]; then
        echo "check-man: $page:" >&2
        printf '  %s\n' "$warnings" >&2
        bad=1
    elif ! MANWIDTH=80 man -l "$page" 2>/dev/null | grep -q '^NAME'; then
        echo "check-man: $page: renders without a NAME section" >&2
        bad=1
    else
        echo "check-man: $(basename "$page") ok"
    fi
done
exit $bad
