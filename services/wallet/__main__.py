"""`python -m services.wallet`: serve, run its migrations, audit the ledger or expire holds
(`--help`)."""

from services.wallet.service import main

raise SystemExit(main())
