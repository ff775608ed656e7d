#!/usr/bin/env bash
# Test dependencies that are not Python packages: Consul 1.8.7 (into a cache,
# by ops/consul/install.sh) and headless Chromium (Debian's `chromium`
# package, via apt when missing) for the Consul UI browser test
# tests/controlplane_integration/test_consul_ui.py. Run by `make install`.
# The browser is driven by the Python package `playwright` (the `test` extra);
# never run `playwright install`: the system chromium is used.
# Idempotent: with both present it changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

bash ops/consul/install.sh

if ! command -v chromium >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "chromium is missing and apt-get is not available: install Chromium and put" \
             "\`chromium\` on PATH" >&2
        exit 1
    fi
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || { echo "installing chromium needs root (or sudo)" >&2; exit 1; }
        SUDO="sudo"
    fi
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y chromium
fi
echo "chromium: $(command -v chromium)"
