# ctxledger — developer commands. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv install demo test lint typecheck imports unit soak bench docs-check clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# strict editable mode (mypy sees the package); re-run on every test because new modules
# need a re-install in strict mode.
install: $(BIN)/python
	$(BIN)/pip install -q -e ".[dev]" --config-settings editable_mode=strict
	@touch $(STAMP)

demo: install
	$(BIN)/ctxledger demo

lint: install
	$(BIN)/ruff check domain projections adapters tests bench
	$(BIN)/ruff format --check domain projections adapters tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint
	$(BIN)/pytest -q -p no:cacheprovider

unit: install
	$(BIN)/pytest -q -p no:cacheprovider tests/unit tests/property

soak: install
	CTXLEDGER_SOAK=1 $(BIN)/pytest -q -p no:cacheprovider -m "slow or not slow" tests

bench: install
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .ctxledger
