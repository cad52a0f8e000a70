#!/usr/bin/env bash
# Install promtool (Debian's package prometheus, Prometheus 2.x) for the alert rules' unit tests
# (tests/deploy/test_alert_rules.py), unless it is there already. Needs root (or sudo) and apt.
# The package also brings the Prometheus server, which is not started here.
set -euo pipefail
"$(dirname "$0")/apt-install.sh" promtool prometheus
promtool --version | head -n 1
