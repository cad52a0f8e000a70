"""What every service shares: configuration, errors, auth, logging, metrics, persistence, the server.

Modules (each small, each importable on its own):
    transport    gRPC's transport, chosen by each entry point before grpc is imported
    config       settings declared once (loaders and README tables), failing fast
    errors       the error family and the one error-to-status table
    auth         JWT identities (player, service, admin), key loading, dev keys, token minting
    logs         structured JSON logs with the request id of the call
    metrics      Prometheus metrics per method and status code
    tracing      OpenTelemetry tracing across services (off by default)
    ratelimit    per-caller token buckets and stream counters
    interceptor  the server pipeline: request id, auth, limits, metrics, error mapping, shutdown
    validation   request checks that name the field
    db           SQLAlchemy async engine, write transactions (SQLite's one writer), read snapshots, asyncpg
    migrations   one Alembic history per service
    idempotency  request id + request hash -> stored response
    server       ServiceSpec, Server (boot, start and stop hooks, health, reflection, graceful stop), main()

Calls to other services go through the client library, `services.client`.
"""
