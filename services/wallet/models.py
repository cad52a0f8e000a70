"""The wallet service's tables. Every table name starts with `wallet_`; the
Alembic history in `migrations/` creates them (`python -m services.wallet revision --autogenerate`
writes a migration from changes here).
"""

from services.common.db import new_metadata
from services.common.idempotency import idempotency_table

metadata = new_metadata()

#: Answers of mutating calls by (caller, request id); see services.common.idempotency.
idempotency_keys = idempotency_table(metadata, "wallet")
