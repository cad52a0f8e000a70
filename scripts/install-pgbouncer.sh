#!/usr/bin/env bash
# Install PgBouncer (Debian's package pgbouncer) for the tests that run the services behind it in
# transaction mode (tests/services/common/test_pgbouncer.py), unless it is there already. Needs
# root (or sudo) and apt. The package's own service is not started here: the tests start their own.
set -euo pipefail
if command -v pgbouncer >/dev/null || [[ -x /usr/sbin/pgbouncer ]]; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "install-pgbouncer: no apt-get here: install pgbouncer (1.18 or later) yourself" >&2
    exit 1
fi
run=()
if [[ $(id -u) -ne 0 ]]; then
    run=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${run[@]}" apt-get update -qq
"${run[@]}" apt-get install -y -qq --no-install-recommends pgbouncer >/dev/null
/usr/sbin/pgbouncer --version | head -n 1
