"""Settings from the environment: defaults, fail-fast errors naming the variable, the README table."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from services.common.config import (
    DEFAULT_PORTS,
    SETTINGS,
    Config,
    ConfigError,
    File,
    Flag,
    Maybe,
    Number,
    OneOf,
    Setting,
    Text,
    Whole,
    load,
)

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("service", list(DEFAULT_PORTS))
def test_defaults_per_service(service: str) -> None:
    config = load(service, {})
    assert config.port == DEFAULT_PORTS[service]
    assert config.metrics_port == 9100 + DEFAULT_PORTS[service] % 10
    assert config.database_url == f"sqlite+aiosqlite:///var/{service}.db"
    assert config.local and config.migrate_on_start
    assert config.addresses["wallet"] == "localhost:50053"


def test_values_are_read_and_normalised() -> None:
    config = load(
        "wallet",
        {
            "BURACO_PORT": "6000",
            "BURACO_DATABASE_URL": "postgresql://u@db:5432/buraco",
            "BURACO_DATABASE_SCHEMA": "wallet",
            "BURACO_METRICS_ENABLED": "off",
            "BURACO_LOG_LEVEL": "debug",
            "BURACO_RANKING_ADDRESS": "ranking:7000",
        },
    )
    assert config.port == 6000 and not config.metrics_enabled and config.log_level == "DEBUG"
    assert (
        config.database_url == "postgresql+asyncpg://u@db:5432/buraco" and config.database_schema == "wallet"
    )
    assert config.addresses["ranking"] == "ranking:7000"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("BURACO_PORT", "abc"),
        ("BURACO_PORT", "70000"),
        ("BURACO_ENV", "staging"),
        ("BURACO_METRICS_ENABLED", "maybe"),
        ("BURACO_DATABASE_URL", "mysql://x/y"),
        ("BURACO_DATABASE_SCHEMA", "bad;schema"),
        ("BURACO_RATE_LIMIT_PER_SECOND", "0"),
        ("BURACO_MAX_MESSAGE_BYTES", "12"),
        ("BURACO_LOG_LEVEL", "LOUD"),
        ("BURACO_JWT_PUBLIC_KEYS", "/no/such/file.pem"),
    ],
)
def test_bad_values_fail_naming_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        load("wallet", {variable: value})


def test_production_needs_keys_and_does_not_migrate_or_reflect_by_default(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="BURACO_JWT_PUBLIC_KEYS"):
        load("wallet", {"BURACO_ENV": "production"})
    keys = tmp_path / "keys.pem"
    keys.write_text("placeholder")
    config = load("wallet", {"BURACO_ENV": "production", "BURACO_JWT_PUBLIC_KEYS": str(keys)})
    assert not config.local and not config.migrate_on_start
    assert not config.reflection  # it lists every method to whoever connects
    assert load("wallet", {}).reflection  # local keeps it, for grpcurl
    turned_on = load("wallet", {"BURACO_ENV": "production", "BURACO_JWT_PUBLIC_KEYS": str(keys),
                                "BURACO_REFLECTION": "true"})
    assert turned_on.reflection


def test_the_readme_documents_every_setting() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [s.name for s in SETTINGS if f"`{s.name}`" not in readme]
    assert not missing, f"README's configuration table lacks {missing}"


def test_a_bad_setting_stops_the_service_before_it_binds(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "services.wallet"],
        cwd=ROOT,
        env={**os.environ, "BURACO_PORT": "nope", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "BURACO_PORT" in result.stderr


# -- one declaration per setting: the loaders and the README's tables --------------------------


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_settings_doc", ROOT / "scripts" / "gen_settings_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readmes_tables_are_written_from_the_declarations() -> None:
    """`python scripts/gen_settings_doc.py` writes them; run it when a declaration changes."""
    generator = _generator()
    assert generator.stale_tables((ROOT / "README.md").read_text()) == []
    assert generator.main(["--check"]) == 0


def test_a_table_out_of_step_or_without_its_markers_is_found() -> None:
    generator = _generator()
    readme = (ROOT / "README.md").read_text()
    edited = readme.replace("| how long answers are kept for retried request ids |", "| how long answers live |")
    assert edited != readme and generator.stale_tables(edited) == ["suite"]
    assert generator.render(edited) == readme
    with pytest.raises(generator.MarkerError):
        generator.render(readme.replace(generator.end_marker("wallet"), ""))


def test_every_services_settings_have_a_table() -> None:
    generator = _generator()
    declared = {
        f"services.{path.parent.name}.settings"
        for path in (ROOT / "services").glob("*/settings.py")
        if "SETTINGS" in vars(importlib.import_module(f"services.{path.parent.name}.settings"))
    }
    assert declared | {"services.common.config"} == set(generator.SECTIONS.values())


@pytest.mark.parametrize(
    ("module", "factory"),
    [
        ("services.matchmaking.settings", "MatchmakingSettings"),
        ("services.game_session.settings", "GameSessionSettings"),
        ("services.wallet.settings", "WalletSettings"),
        ("services.tournament.settings", "TournamentSettings"),
    ],
)
def test_the_settings_classes_defaults_are_the_declared_ones(module: str, factory: str) -> None:
    settings = importlib.import_module(module)
    loaded = settings.load({"BURACO_TOURNAMENT_REPLICA_ID": "local"})
    assert loaded == getattr(settings, factory)()


def test_a_built_config_has_the_declared_defaults_but_a_free_port_and_a_memory_database() -> None:
    loaded, built = load("wallet", {}), Config(service="wallet")
    different = {name for name in vars(built) if getattr(built, name) != getattr(loaded, name)}
    assert different == {"port", "metrics_port", "health_port", "database_url", "addresses"}


def test_kinds_parse_and_bound_their_values(tmp_path: Path) -> None:
    assert Setting("X", Whole(1, 5), "3", "").read({}) == 3
    assert Setting("X", Whole(1, 5), "3", "").read({"X": ""}) == 3  # empty is unset
    with pytest.raises(ConfigError, match="X='6': must be between 1 and 5"):
        Setting("X", Whole(1, 5), "3", "").read({"X": "6"})
    with pytest.raises(ConfigError, match=r"X='2\.5': expected a whole number"):
        Setting("X", Whole(1, 5), "3", "").read({"X": "2.5"})
    with pytest.raises(ConfigError, match="X='nan'"):
        Setting("X", Number(0, 1), "0.5", "").read({"X": "nan"})
    assert Setting("X", OneOf(("A", "B"), upper=True), "A", "").read({"X": "b"}) == "B"
    assert Setting("X", Maybe(File()), "", "").read({}) is None
    existing = tmp_path / "keys.pem"
    existing.write_text("x")
    assert Setting("X", Maybe(File()), "", "").read({"X": str(existing)}) == existing
    assert Setting("X", Whole(0, 9), "", "", default_text="per service").read({}, default="7") == 7
    assert Setting("X", Number(0, 1_000_000), "", "").values() == "number, 0 to 1,000,000"
    assert Setting("X", Number(0.05, 60), "", "").values() == "number, 0.05 to 60"


def test_production_rules_are_declared_with_the_setting() -> None:
    refused = Setting("X", Maybe(Text()), "", "", production="refused")
    required = Setting("Y", Text(), "", "", production="required")
    flipped = Setting("Z", Flag(), "true", "", production_default="false")
    assert refused.read({"X": "seed"}) == "seed"
    with pytest.raises(ConfigError, match="X: refused when BURACO_ENV=production"):
        refused.read({"X": "seed"}, production=True)
    assert refused.read({}, production=True) is None
    with pytest.raises(ConfigError, match="Y: required when BURACO_ENV=production"):
        required.read({}, production=True)
    assert (flipped.read({}), flipped.read({}, production=True), flipped.read({"Z": "yes"}, production=True)) == (
        True,
        False,
        True,
    )
    assert refused.values() == "text; refused when BURACO_ENV=production"
