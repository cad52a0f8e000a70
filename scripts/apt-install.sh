#!/usr/bin/env bash
# Install Debian packages the tests need, unless the commands they provide are there already:
#   scripts/apt-install.sh COMMAND[,COMMAND...] PACKAGE...
# Needs root (or sudo) and apt. Each scripts/install-*.sh says which tests need what.
set -euo pipefail
IFS=, read -ra commands <<<"$1"
shift
missing=()
for command in "${commands[@]}"; do
    PATH="$PATH:/usr/sbin:/sbin" command -v "$command" >/dev/null || missing+=("$command")
done
if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "$(basename "$0"): no apt-get here: install ${missing[*]} (Debian: $*) yourself" >&2
    exit 1
fi
run=()
if [[ $(id -u) -ne 0 ]]; then
    run=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${run[@]}" apt-get update -qq
"${run[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
