# Buraco platform: developer entry points. `make help` lists them.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python

.PHONY: help venv test lint typecheck unit bench-engine

help:
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

$(BIN)/activate: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $(BIN)/activate

venv: $(BIN)/activate ## create the virtual environment and install pinned dependencies

lint: venv ## ruff
	$(BIN)/ruff check engine tests

typecheck: venv ## mypy (strict)
	$(BIN)/mypy engine

unit: venv ## the test suite
	$(PY) -m pytest -q

test: lint typecheck unit ## lint, type checks and every test

bench-engine: venv ## engine speed: hands/s, turns/s, legal_actions latency
	$(PY) -m engine.bench
