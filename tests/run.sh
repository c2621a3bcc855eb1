#!/usr/bin/env bash
# Runs every test gpushare has: unit and integration tests (a private dbus-daemon, the real
# daemon, fake libcuda/libnvidia-ml test doubles, a real Prometheus scraping the metrics) and,
# unless GPUSHARE_SKIP_SYSTEM_TEST=1, the system test that boots Debian with systemd in a
# container and installs the package.
# Needs root (it creates users, drops privileges and boots a container) and installs what it
# needs with apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
    echo "tests/run.sh: run as root (sudo tests/run.sh): the tests create users and boot a container" >&2
    exit 1
fi

missing=()
command -v dbus-daemon >/dev/null || missing+=(dbus)
command -v busctl >/dev/null || missing+=(systemd)
command -v gcc >/dev/null || missing+=(gcc)
command -v setpriv >/dev/null || missing+=(util-linux)
command -v man >/dev/null || missing+=(man-db)
command -v python3 >/dev/null || missing+=(python3)
command -v prometheus >/dev/null || missing+=(prometheus)
command -v tmux >/dev/null || missing+=(tmux)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

cargo build --workspace --all-targets
cargo test --workspace

if [ "${GPUSHARE_SKIP_SYSTEM_TEST:-0}" != 1 ] && [ -x tests/system/e2e.sh ]; then
    tests/system/e2e.sh
fi
