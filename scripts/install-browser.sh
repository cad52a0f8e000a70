#!/usr/bin/env bash
# Install Debian's Chromium and its WebDriver (packages chromium, chromium-driver) for the web
# table's browser tests, unless they are there already. Needs root (or sudo) and apt.
set -euo pipefail
"$(dirname "$0")/apt-install.sh" chromium,chromedriver chromium chromium-driver
chromium --version
