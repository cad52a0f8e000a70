"""The Buraco gRPC services: `common` (the frame every service runs in) and one package per service."""

import os

#: gRPC's transport in every process of the suite (services, CLI, bench, tests): the iomgr TCP
#: transport, not EventEngine's (grpcio's default since 1.80), which hands each socket read and
#: write to a pool of threads of its own and then to the asyncio loop's thread: on a replica's one
#: core every message paid two thread switches. Measured at 1,800 actions/s (docs/game-session.md,
#: "Measured"): the game-session replica's CPU per action about 5% lower, the bench's client's 9%,
#: p50 and p99 lower; a grpc.aio echo in one process half the CPU per call. grpc reads it once, when
#: it is first imported: this package is the first module of every entry point. An operator's own
#: GRPC_EXPERIMENTS wins (empty: grpc's defaults). Re-measure when upgrading grpcio: grpc logs
#: "Unknown experiment" (and goes on with its defaults) once these experiments are retired.
GRPC_EXPERIMENTS = "-event_engine_listener,-event_engine_for_all_other_endpoints,-event_engine_client"
os.environ.setdefault("GRPC_EXPERIMENTS", GRPC_EXPERIMENTS)
