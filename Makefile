# Buraco platform: developer entry points. `make help` lists them.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
PIP_INSTALL := $(BIN)/pip install -q -c constraints.txt
# Breaking changes are checked against the released contract (see docs/contracts.md).
PROTO_RELEASE := proto/release/buraco-v1.json

.PHONY: help venv proto proto-check proto-lint proto-breaking proto-release test lint typecheck unit \
	run migrate bench-engine wheel-native engine-native test-engine-native bench-ranking deploy-check bench-wallet bench-bots bench-sessions bench-gateway bench-matchmaking \
	bench-tournament bench-suite clean

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
	$(BIN)/ruff check engine services tests scripts loadtest bench

typecheck: venv ## mypy (strict)
	$(BIN)/mypy engine services tests scripts loadtest bench

# Test modules are spread over TEST_JOBS processes, each module's tests in one (they share
# module- and session-wide fixtures: the browser tests' suite); TEST_JOBS=0 runs them in this one.
TEST_JOBS ?= 2
unit: venv ## the test suite (TEST_JOBS processes)
	$(PY) -m pytest -q $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile)

test: lint typecheck unit ## lint, type checks and every test

migrate: venv ## migrate every service's local SQLite database under var/
	for s in matchmaking game_session wallet ranking tournament; do \
		BURACO_DATABASE_URL=sqlite+aiosqlite:///var/$$s.db $(PY) -m services.$$s migrate || exit 1; done

run: venv proto migrate ## start every service locally (SQLite under var/); Ctrl-C stops them
	$(PY) -m services.local

# The engine's hot modules (engine/native.txt) compiled by mypyc (same source, no rewrite): the
# project's wheel built with BURACO_NATIVE=1 (setup.py), which the service image installs too.
NATIVE := build/native
WHEELS := build/wheels
NATIVE_VENV := build/native-venv

wheel-native: venv ## the project's wheel with the engine compiled by mypyc, into build/wheels (what the image installs)
	rm -rf $(WHEELS) build/lib.* build/temp.* && mkdir -p build
	BURACO_NATIVE=1 $(BIN)/pip wheel -q --no-deps --no-build-isolation -w $(WHEELS) . >build/mypyc.log 2>&1 \
		|| (tail -30 build/mypyc.log; exit 1)

engine-native: wheel-native ## the compiled engine unpacked into build/native (PYTHONPATH=build/native; about 2x faster)
	rm -rf $(NATIVE) && $(PY) scripts/unpack_native.py $(WHEELS) $(NATIVE)

# The wheel installed with its pinned dependencies into a fresh virtual environment, as the image
# installs it, and the engine's tests run against that install (tests/engine/test_native_build.py checks
# that every module of engine/native.txt was loaded from its extension module).
test-engine-native: wheel-native ## the engine's tests against the compiled wheel in a fresh virtual environment
	rm -rf $(NATIVE_VENV) && $(PYTHON) -m venv $(NATIVE_VENV)
	$(NATIVE_VENV)/bin/pip install -q -c constraints.txt $(WHEELS)/buraco-*.whl pytest pytest-asyncio hypothesis
	BURACO_EXPECT_NATIVE_ENGINE=1 $(NATIVE_VENV)/bin/pytest -q -p no:cacheprovider -o pythonpath= \
		--import-mode=append tests/engine -k "not test_replay"

# The engine's bench (bench/engine.py) runs twice: on the sources, then on the mypyc build: from
# build/native, whose engine comes first on the import path, with the repository on PYTHONPATH for
# the bench itself. Each run ends with the play digests (digest: lines).
# BENCH_BASELINE=PATH (a worktree of the commit to compare with, built alike: `make venv
# engine-native` in it) adds that engine's figures, measured interleaved with these in the same
# run, pure Python then compiled, as ratios (bench: ..._ratio X x) and whether the digests agree.
BENCH_BASELINE ?=
BENCH_BASELINE_ROUNDS ?= 3

bench-engine: venv engine-native ## engine speed: hands/s, turns/s, legal_actions latency (pure Python, then native); BENCH_BASELINE=PATH for ratios
	$(PY) -m bench.engine --all-presets --digest
	cd $(NATIVE) && PYTHONPATH=$(CURDIR) $(CURDIR)/$(PY) -m bench.engine --digest
	if [ -n "$(BENCH_BASELINE)" ]; then \
		$(PY) -m bench.engine --baseline $(BENCH_BASELINE) --rounds $(BENCH_BASELINE_ROUNDS) && \
		$(PY) -m bench.engine --baseline $(BENCH_BASELINE) --rounds $(BENCH_BASELINE_ROUNDS) --native; fi

# Two suites, fixed seeds, every preset:
# - heuristic against random-legal, 2 players: matches to the preset's target, at least 600 hands each
#   (a 95% interval of about +-3% on the hand win rate);
# - expert against heuristic, 2 and 4 players: BENCH_EXPERT_GAMES matches each (BENCH_EXPERT_EXPRESS_GAMES
#   in the one-hand presets) with the expert's default budget of CPU per decision, on the mypyc build
#   (what a server runs), over BENCH_JOBS processes; the win rates with their 95% intervals (Wilson's
#   over the matches, and Student's t over the duplicate pairs, the sample's unit) and the CPU per
#   expert decision. 120 duplicate matches a pairing: the expert wins about 65-75% of them, and at
#   60 matches the 95% interval's low end sits at 55-60% there (a half-width of about 11 points; at 120,
#   8). The one-hand presets play 200: the one-hand match between two pairs is where the expert's
#   rate sits closest to 60% (about two in three), and 200 matches (a half-width of about 6.5 points)
#   say whether it clears 60%, where 120 cannot. The expert suite takes two hours and a half to three
#   here (the heuristic's about a minute); it can be run in parts (`bench.selfplay --first-game`,
#   `--outcomes`, `--summarize`), or small
#   (`BENCH_EXPERT_GAMES=4 BENCH_EXPERT_EXPRESS_GAMES=4` for a look).
BENCH_BOTS_PRESETS := aberto aberto_sujo fechado fechado_stbl fechado_sujo classico_104 buraco_2005 aberto_joker50
BENCH_EXPERT_GAMES := 120
BENCH_EXPERT_EXPRESS_GAMES := 200
BENCH_JOBS := 2

bench-bots: venv engine-native ## bot strength: heuristic vs random-legal, expert vs heuristic (2 and 4 players), CPU per decision
	for p in $(BENCH_BOTS_PRESETS); do \
		$(PY) -m bench.selfplay --ruleset $$p --players 2 --games 100 --min-hands 600 \
			--bots heuristic,random --seed bench --bench || exit 1; done
	cd $(NATIVE) && PYTHONPATH=$(CURDIR) $(CURDIR)/$(PY) -m bench.selfplay --suite all \
		--suite-players 2,4 --games $(BENCH_EXPERT_GAMES) --express-games $(BENCH_EXPERT_EXPRESS_GAMES) \
		--bots expert,heuristic --jobs $(BENCH_JOBS) --seed bench --bench

bench-ranking: venv ## ranking: rating accuracy on self-play; 1M players on PostgreSQL: reads p99, matches/s
	$(PY) -m bench.ranking $(ARGS)

deploy-check: venv ## render the Kubernetes overlays, validate them offline (strict), lint YAML, Dockerfile, scripts
	BIN=$(BIN) bash deploy/check.sh

bench-wallet: venv ## wallet: 4-player hold-and-settle cycles/s and p99, SQLite and PostgreSQL, 50 clients
	$(PY) -m bench.wallet $(ARGS)

# One game-session process (PostgreSQL, pinned to core 0) and a driver of bot tables on the other
# cores; sizes from BURACO_BENCH_* (see bench/game_sessions.py), `ARGS=--smoke` for a tiny run.
bench-sessions: venv engine-native ## game sessions: 1,000 tables at human pace (p99), the highest sustained action rate vs a grpc.aio echo
	$(PY) -m bench.game_sessions $(ARGS)

# The gateway pinned to core 0, its game session (PostgreSQL) and a driver of browser-like players
# on the other cores; sizes from BURACO_BENCH_* (see bench/gateway.py), `ARGS=--smoke` for a tiny run.
bench-gateway: venv engine-native ## gateway: latency it adds to a move vs direct gRPC at 1,000 players, players per gateway core (p99 < 100 ms), memory per socket
	$(PY) -m bench.gateway $(ARGS)

bench-matchmaking: venv ## matchmaking: one matcher pass over 100,000 tickets, tickets matched/s end to end and at steady rates (SQLite, PostgreSQL), match quality
	$(PY) -m bench.matchmaking $(ARGS)

# The whole suite (services.local on PostgreSQL, the compiled engine) under the journey of real players at
# human pace, a fresh suite per level; `ARGS="--levels 500"` for one level, `ARGS=--smoke` for a tiny run.
bench-suite: venv engine-native ## the whole suite: players held at human pace with every RPC's p99 < 100 ms, CPU share of each service
	$(PY) -m bench.suite $(ARGS)

bench-tournament: venv ## tournaments: Swiss pairing, standings, prize shares and a bracket at 1,024 entrants (ms)
	$(PY) -m bench.tournament $(ARGS)

clean: ## remove the virtual environment, local databases, dev keys and native builds
	rm -rf $(VENV) var build

.PHONY: loadtest loadtest-smoke loadtest-cleanup

# `make loadtest` drives simulated players against a suite that is running (`make run`, or the
# addresses in LOADTEST_ARGS: --targets); docs/performance.md lists every knob.
# A think time of 50 ms keeps each player under the per-player rate limit (20 calls/s) of `make run`.
LOADTEST_ARGS ?= --players 20 --ramp 5 --duration 30 --think-time 0.05 --fail-if 'p99<100ms' --max-error-rate 0.01

loadtest: venv ## load test a running suite (make run): LOADTEST_ARGS='--players 40 ...'; reports in var/loadtest
	$(PY) -m loadtest --out var/loadtest $(LOADTEST_ARGS)

loadtest-cleanup: venv ## erase a load-test run: CLEANUP_ARGS='--run-id RUN [--dry-run] ...' (python -m loadtest cleanup)
	$(PY) -m loadtest cleanup $(CLEANUP_ARGS)

loadtest-smoke: venv ## start the suite, run the load test at a tiny size, stop it (CI)
	$(PY) -m loadtest.smoke
