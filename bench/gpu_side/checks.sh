# shellcheck shell=bash
# Checks for the GPU-side scripts, sourced by run.sh and bypass.sh: `check` prints a check's
# result as a JSON line and remembers it in CHECKS; `field` reads a value from a program's JSON
# output.
# shellcheck source=../json.sh
. "$(dirname "${BASH_SOURCE[0]}")/../json.sh"

check() { # check NAME OK key=value...
    CHECKS+=("$1=$2")
    json check="$1" ok="$2" "${@:3}"
}

field() { # field FILE EVENT KEY: a value from a program's JSON output
    python3 - "$@" <<'PY'
import json, sys
path, event, key = sys.argv[1:]
try:
    for line in open(path):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if d.get("event") == event:
            v = d.get(key)
            print("null" if v is None else v)
            sys.exit(0)
except OSError:
    pass
print("null")
PY
}
