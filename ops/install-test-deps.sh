#!/usr/bin/env bash
# Test dependencies that are not Python packages: Consul 1.8.7 and headless
# Chromium (Debian's package) for the Consul UI browser test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ops/consul/install.sh
command -v chromium >/dev/null || { apt-get update && apt-get install -y chromium; }
