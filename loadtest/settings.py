"""What one run does: the knobs of `python -m loadtest`, shared by every driver process."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from services.common.loadtest_runs import RUN_ID_PATTERN

SCENARIOS = ("journey", "tables", "backend", "web")
BACKEND_SERVICES = ("wallet", "ranking")
BOTS = ("heuristic", "random")


@dataclass(frozen=True)
class Settings:
    #: `journey`: the player's whole journey through the public services (matchmaking, game
    #: sessions, wallet, ranking). `tables`: the same without matchmaking; the driver seats each
    #: group of players as matchmaking would (holds, CreateTable). `backend`: wallet and ranking
    #: only; the driver plays each match with the engine itself and makes the calls matchmaking
    #: (holds) and the game-session service (settle, record) would make. `web`: the journey as
    #: browsers make it, through the gateway (`gateway`): JSON over HTTP and one WebSocket per
    #: player (loadtest.web).
    scenario: str = "journey"
    #: The backend scenario's services: both, or one alone (to measure it by itself).
    only: tuple[str, ...] = BACKEND_SERVICES
    players: int = 4
    ramp_s: float = 0.0
    duration_s: float = 60.0
    #: Journeys per player; 0: as many as fit in `duration_s`.
    journeys: int = 0
    seats: int = 2
    preset: str = "aberto"
    #: 0: express (one hand); else the match's target points.
    target_points: int = 0
    bet: int = 10
    practice: bool = False
    bot: str = "heuristic"
    #: Mean pause before each game action (seconds); each pause is uniform in [0, 2 * mean].
    think_time_s: float = 0.0
    #: Players act on their `Play` stream (as a gateway holding a socket per player would) instead
    #: of unary calls beside `SubscribeChanges`.
    play_stream: bool = False
    targets: dict[str, str] = field(default_factory=dict)
    #: The gateway's base URL (`http://host:port`): the `web` scenario's one target.
    gateway: str = ""
    token_key: Path = Path("var/dev-keys/dev-private.pem")
    #: Tokens issued beforehand (`loadtest.client.Tokens.from_file`), instead of signing them with
    #: `token_key`: a deployment's keys stay with it.
    tokens_file: str = ""
    #: TLS to the services: the CA bundle that verifies them (empty: plaintext), and a client
    #: certificate and key for servers that require one (mutual TLS).
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    #: The name the services' certificates must carry, when not the host of the address dialled
    #: (a port-forward, an IP, one ingress in front of everything).
    tls_server_name: str = ""
    audience: str = "buraco"
    seed: str = "loadtest"
    #: Prefix of the players' ids and match ids, unique per run (ids must not repeat across runs).
    run_id: str = ""
    processes: int = 1
    connections: int = 4
    rpc_timeout_s: float = 10.0
    #: How long a player waits for a match, the settlement or the ranking to show up.
    wait_timeout_s: float = 60.0
    #: After `duration_s`, how long journeys in flight may run on before they are cancelled.
    drain_s: float = 120.0
    house_cut_percent: int = 20

    def check(self) -> None:
        """ValueError naming the knob when the settings cannot make a run."""
        if self.scenario not in SCENARIOS:
            raise ValueError(f"--scenario must be one of {', '.join(SCENARIOS)}")
        if RUN_ID_PATTERN.fullmatch(self.run_id) is None:  # the services erase only such runs
            raise ValueError("--run-id must be 3 to 40 characters of [a-z0-9-], starting with a letter or a digit")
        if not self.only or any(name not in BACKEND_SERVICES for name in self.only):
            raise ValueError(f"--only takes {' or '.join(BACKEND_SERVICES)}")
        if self.scenario != "backend" and self.only != BACKEND_SERVICES:
            raise ValueError("--only is for --scenario backend")
        if self.scenario == "web" and not self.gateway.startswith(("http://", "https://")):
            raise ValueError("--scenario web needs --gateway URL (http://host:port, the gateway's address)")
        if self.scenario != "web" and self.gateway:
            raise ValueError("--gateway is for --scenario web")
        if self.scenario == "web" and self.play_stream:
            raise ValueError("--play-stream is not for --scenario web (the gateway holds the Play streams)")
        if self.seats not in (2, 4):
            raise ValueError("--seats must be 2 or 4")
        if self.players < self.seats or self.players % self.seats:
            raise ValueError(f"--players ({self.players}) must be a positive multiple of --seats ({self.seats})")
        if self.processes < 1 or self.processes > self.players // self.seats:
            raise ValueError("--processes must be between 1 and players / seats")
        if self.bot not in BOTS:
            raise ValueError(f"--bot must be one of {', '.join(BOTS)}")
        if self.practice and self.bet:
            raise ValueError("--practice tables take no bet: pass --bet 0")
        if not self.practice and self.bet <= 0:
            raise ValueError("--bet must be positive for competitive tables (or pass --practice)")
        if self.target_points and not 505 <= self.target_points <= 3005:
            raise ValueError("--target-points must be 0 (express) or 505..3005")
        durations = (("--ramp", self.ramp_s), ("--duration", self.duration_s), ("--think-time", self.think_time_s))
        for name, value in durations:
            if value < 0:
                raise ValueError(f"{name} must not be negative")
        if self.journeys < 0:
            raise ValueError("--journeys must not be negative")
        if self.journeys == 0 and self.duration_s <= 0:
            raise ValueError("give --duration > 0, or --journeys")
        if not 0 <= self.house_cut_percent <= 100:
            raise ValueError("--house-cut must be 0..100")
        if self.tokens_file and not Path(self.tokens_file).is_file():
            raise ValueError(f"--tokens {self.tokens_file}: no such file")
        if self.tokens_file and self.scenario == "web":
            raise ValueError("--tokens is not for --scenario web (its players sign in at the gateway)")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("--tls-cert and --tls-key go together")
        if (self.tls_cert or self.tls_server_name) and not self.tls_ca:
            raise ValueError("--tls-cert, --tls-key and --tls-server-name need --tls-ca (TLS to the services)")
        for name, path in (("--tls-ca", self.tls_ca), ("--tls-cert", self.tls_cert), ("--tls-key", self.tls_key)):
            if path and not Path(path).is_file():
                raise ValueError(f"{name} {path}: no such file")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["token_key"] = str(self.token_key)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Settings:
        fields = {**data, "token_key": Path(data["token_key"]), "targets": dict(data["targets"])}
        return cls(**{**fields, "only": tuple(data["only"])})
