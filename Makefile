# Buraco platform: developer entry points. `make help` lists them.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
PIP_INSTALL := $(BIN)/pip install -q -c constraints.txt
# Breaking changes are checked against the released contract (see docs/contracts.md).
PROTO_RELEASE := proto/release/buraco-v1.json

.PHONY: help venv proto proto-check proto-lint proto-breaking proto-release test lint typecheck unit \
	run migrate bench-engine bench-wallet clean

help:
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

$(BIN)/activate: requirements.txt requirements-dev.txt constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip==25.3
	$(PIP_INSTALL) -r requirements-dev.txt
	$(PIP_INSTALL) --no-deps --no-build-isolation -e .
	touch $(BIN)/activate

venv: $(BIN)/activate ## create the virtual environment and install pinned dependencies

proto: venv ## regenerate the Python code for proto/ into buraco/ (committed)
	$(PY) scripts/gen_proto.py

proto-check: proto-lint proto-breaking venv ## buf lint, buf breaking, and generated code up to date
	$(PY) scripts/gen_proto.py --check

proto-lint: venv ## lint the contracts (buf)
	$(BIN)/buf lint

proto-breaking: venv ## fail on breaking changes against the released contract
	$(BIN)/buf breaking --against $(PROTO_RELEASE)

proto-release: venv ## record the current contract as the released one (when cutting a release)
	$(BIN)/buf build --exclude-source-info -o $(PROTO_RELEASE)

lint: venv ## ruff
	$(BIN)/ruff check engine services tests scripts

typecheck: venv ## mypy (strict)
	$(BIN)/mypy engine services tests scripts

unit: venv ## the test suite
	$(PY) -m pytest -q

test: lint typecheck unit ## lint, type checks and every test

migrate: venv ## migrate every service's local SQLite database under var/
	for s in matchmaking game_session wallet ranking tournament; do \
		BURACO_DATABASE_URL=sqlite+aiosqlite:///var/$$s.db $(PY) -m services.$$s migrate || exit 1; done

run: venv proto migrate ## start every service locally (SQLite under var/); Ctrl-C stops them
	$(PY) -m services.local

bench-engine: venv ## engine speed: hands/s, turns/s, legal_actions latency
	$(PY) -m engine.bench

bench-wallet: venv ## wallet: 4-player hold-and-settle cycles/s and p99, SQLite and PostgreSQL, 50 clients
	$(PY) -m services.wallet.bench

clean: ## remove the virtual environment, local databases and dev keys
	rm -rf $(VENV) var
