"""Settings from the environment: defaults, fail-fast errors naming the variable, the README table."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.config import DEFAULT_PORTS, SETTINGS, ConfigError, load

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


def test_production_needs_keys_and_does_not_migrate_by_default(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="BURACO_JWT_PUBLIC_KEYS"):
        load("wallet", {"BURACO_ENV": "production"})
    keys = tmp_path / "keys.pem"
    keys.write_text("placeholder")
    config = load("wallet", {"BURACO_ENV": "production", "BURACO_JWT_PUBLIC_KEYS": str(keys)})
    assert not config.local and not config.migrate_on_start


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
