"""How code outside a service, and one service calling another, reach the suite's services.

A library, not a service: every service, the terminal client, the load-test kit, the benchmarks
and the tests import it, as they import `services.common`.

Modules:
    channels    channels carrying a token and the request id; `Clients`, the stubs of a service
    calls       a failed call classified: `Refused` (definitive) or `Unreachable` (retry)
    ratings     players' ratings read from ranking in batches
    redirects   game-session owner redirects: `redirect_of` reads one, `Owners` follows them
    tables      game-session tables as the other services see them
    model       a seat's picture of a table kept from its stream; the shadow state bots play from
    connection  one participant's connection to a table: stream resume, retried actions, play_seat
"""
