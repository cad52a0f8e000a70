"""The matchmaking service as a process: served (migrating its database), fuzzed (no request makes
it answer INTERNAL or UNKNOWN), and stopped by SIGTERM within the grace period."""

from pathlib import Path

from buraco.v1 import matchmaking_pb2
from tests.services.service_checks import check_service_process

SERVICE = matchmaking_pb2.DESCRIPTOR.services_by_name["MatchmakingService"]


def test_the_process_serves_survives_fuzzing_and_stops_on_sigterm(tmp_path: Path) -> None:
    check_service_process("matchmaking", SERVICE, tmp_path)
