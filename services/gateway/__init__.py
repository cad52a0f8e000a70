"""The player edge: an HTTP/JSON and WebSocket gateway in front of the suite, and the web table.

Browsers and mobile apps sign in here, call the services' player methods as JSON, and follow
everything that streams (tables, tickets, the lobby, tournaments) on one WebSocket. The gateway
mints the players' tokens, follows game-session owner redirects, resumes table streams across
replica failover, and guards the edge (rate limits, sizes, origins, sockets per player).
docs/gateway.md describes it.

    settings.py   its settings               app.py       the HTTP routes and the pipeline
    signin.py     sign-in, tokens, refresh   sockets.py   the WebSocket protocol
    methods.py    the calls offered, JSON    upstream.py  calls to the services for players
    errors.py     gRPC status -> HTTP, JSON  edge.py      client address, origins, rate limits
    service.py    the process (uvicorn)      web/         the web table (static files)
"""
