# shellcheck shell=bash
# json KEY=VALUE...: one JSON object on a line; numbers and true/false/null stay bare, the rest
# become strings. Sourced by the benchmark scripts that write .jsonl files.
json() {
  python3 - "$@" <<'PY'
import json, sys
out = {}
for kv in sys.argv[1:]:
    k, _, v = kv.partition("=")
    if v in ("true", "false", "null"):
        out[k] = {"true": True, "false": False, "null": None}[v]
    else:
        try:
            out[k] = int(v)
        except ValueError:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
print(json.dumps(out), flush=True)
PY
}
