#!/usr/bin/env bash
# Install PgBouncer (Debian's package pgbouncer, 1.18 or later) for the tests that run the services
# behind it in transaction mode (tests/services/common/test_pgbouncer.py), unless it is there
# already. Needs root (or sudo) and apt. The package's own service is not started here: the tests
# start their own.
set -euo pipefail
"$(dirname "$0")/apt-install.sh" pgbouncer pgbouncer
PATH="$PATH:/usr/sbin" pgbouncer --version | head -n 1
