#!/usr/bin/env bash
# Install promtool (Debian's package prometheus) for the alert rules' unit tests
# (tests/deploy/test_alert_rules.py), unless it is there already. Needs root (or sudo) and apt.
# The package also brings the Prometheus server, which is not started here.
set -euo pipefail
if command -v promtool >/dev/null; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "install-promtool: no apt-get here: install promtool (Prometheus 2.x) yourself" >&2
    exit 1
fi
run=()
if [[ $(id -u) -ne 0 ]]; then
    run=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${run[@]}" apt-get update -qq
"${run[@]}" apt-get install -y -qq --no-install-recommends prometheus >/dev/null
promtool --version | head -n 1
