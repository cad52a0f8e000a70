#!/usr/bin/env bash
# Install Debian's Chromium and its WebDriver (packages chromium, chromium-driver) for the web
# table's browser tests, unless they are there already. Needs root (or sudo) and apt.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "install-browser: no apt-get here: install chromium and chromedriver yourself" >&2
    exit 1
fi
run=()
if [[ $(id -u) -ne 0 ]]; then
    run=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${run[@]}" apt-get update -qq
"${run[@]}" apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
chromium --version
