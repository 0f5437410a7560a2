# The two commands: `make up` starts Veritask, `make test` runs every check.
# Both create the environment first, on a machine that has only Python 3.11 and pip.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test lint typecheck unit fuzz bench docs clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

up: $(STAMP)
	$(BIN)/veritask up

test: $(STAMP) lint typecheck
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# Many more Hypothesis examples than CI runs; not part of `make test`.
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz $(BIN)/pytest tests/unit -k property -p no:timeout

bench: $(STAMP)
	$(BIN)/python -m bench.ledger

docs: $(STAMP)
	$(BIN)/python -m veritask.docgen

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
