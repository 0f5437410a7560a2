# The two commands: `make up` starts Veritask, `make test` runs every check.
# Both create the environment first, on a machine that has only Python 3.11 and pip.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test lint typecheck unit fuzz bench soak sim docs screenshots clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The examples are applied, and their Python tasks (examples/jobs) importable by the workers.
# `make up PORT=9000` picks the port; ARGS passes more options (`ARGS="--slots 4"`).
up: $(STAMP)
	$(BIN)/veritask up --examples "$(CURDIR)/examples" $(if $(PORT),--port $(PORT)) $(ARGS)

test: $(STAMP) lint typecheck
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench tools
	$(BIN)/ruff format --check src tests bench tools
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# Many more Hypothesis examples than CI runs, and the API fuzzed as every role at length;
# not part of `make test`.
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz $(BIN)/pytest tests/unit -k property -p no:timeout
	VERITASK_API_FUZZ_EXAMPLES=150 $(BIN)/pytest tests/integration/test_openapi_fuzz.py -p no:timeout

# Figures for the ledger (its speed and its bytes per task), the executor, the scheduler (and
# two schedulers beside one on PostgreSQL), `veritask up`, the web UI's render of a
# 1,000-instance run, a 20,000-task run's first page and cancel, 10,000 open waits, a
# 1,000-task Python pipeline's compile and apply, and a Spark driver's submit-to-RUNNING (on
# tools/spark-local's master), each beside its baseline or target; never by the tests.
# The scale curve runs here at 0 and 100,000 finished instances; the full curve is
# `python -m bench.scale --sizes 0,100000,1000000` (about 10 GB of SQLite).
bench: $(STAMP)
	$(BIN)/python -m bench.ledger
	$(BIN)/python -m bench.executor
	$(BIN)/python -m bench.scheduler
	$(BIN)/python -m bench.schedulers
	$(BIN)/python -m bench.scale
	$(BIN)/python -m bench.ledger_size
	$(BIN)/python -m bench.chain
	$(BIN)/python -m bench.up
	$(BIN)/python -m bench.ui
	$(BIN)/python -m bench.large_run
	$(BIN)/python -m bench.explain
	$(BIN)/python -m bench.backfill
	$(BIN)/python -m bench.pools
	$(BIN)/python -m bench.waits
	$(BIN)/python -m bench.pipelines
	$(BIN)/python -m bench.mapping --postgres
	$(BIN)/python -m bench.celery --rounds 3
	$(BIN)/python -m bench.container
	tools/spark-local start && eval "$$(tools/spark-local env)" && $(BIN)/python -m bench.spark --rounds 5

# The scheduler's kill -9 fault test at length (SOAK_ITERATIONS per database, a new random
# seed each time unless SOAK_SEED is given); not part of `make test`.
SOAK_ITERATIONS ?= 200
SOAK_SEED ?= $(shell date +%s)
# With them, the frozen-worker fault tests (a worker or pool process stopped by SIGSTOP).
FREEZE_ITERATIONS ?= 20
soak: $(STAMP)
	VERITASK_SOAK_ITERATIONS=$(SOAK_ITERATIONS) VERITASK_SOAK_SEED=$(SOAK_SEED) \
		VERITASK_FREEZE_ITERATIONS=$(FREEZE_ITERATIONS) \
		$(BIN)/pytest tests/scheduling/test_faults.py tests/execution/celery/test_celery_executor.py \
		tests/execution/celery/test_celery_faults.py -k "killing or frozen" --timeout=0 -v

# The deterministic simulator (tools/sim.py, docs/reliability.md): SEEDS seeds from FIRST, or
# the one seed SEED (a failure prints the command that replays it); STEPS of faults per seed.
SEEDS ?= 200
FIRST ?= 0
sim: $(STAMP)
	$(BIN)/python -m tools.sim $(if $(SEED),--seed $(SEED),--seeds $(SEEDS) --first $(FIRST)) \
		$(if $(STEPS),--steps $(STEPS))

# The web UI's pages in English and Chinese (docs/screenshots/*.png), from a real `up` and
# Chromium (/usr/bin/chromium: apt-get install chromium fonts-wqy-microhei).
screenshots: $(STAMP)
	$(BIN)/python -m tools.screenshots

docs: $(STAMP)
	$(BIN)/python -m veritask.docgen

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
