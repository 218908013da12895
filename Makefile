# ctxledger — developer commands. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint typecheck imports unit soak bench bench-docs bench-peers docs-check docs-tables min-versions clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# strict editable mode (mypy sees the package); re-run on every test because new modules
# need a re-install in strict mode. Every extra ([all]) plus the dev tools. The filter hides
# only setuptools' notice that strict mode uses build/__editable__…; any other warning shows.
install: $(BIN)/python
	PYTHONWARNINGS="ignore:Editable installation" \
	  $(BIN)/pip install -q -e ".[all,dev]" --config-settings editable_mode=strict
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

# Every direct dependency at the lowest version pyproject.toml allows (uv's lowest-direct
# resolution, in .venv-min), then the unit, property and integration tests and the installed
# console script's end-to-end tests (usage errors, bad stores, the spine): the lower bounds
# are versions that work, not guesses.
min-versions: install
	rm -rf .venv-min
	$(BIN)/uv venv -q -p $(BIN)/python .venv-min
	$(BIN)/uv pip install -q --python .venv-min/bin/python --resolution lowest-direct -e ".[all,dev]"
	.venv-min/bin/python -m pytest -q -p no:cacheprovider tests/unit tests/property tests/integration \
		tests/e2e/test_cli_errors.py tests/e2e/test_cli_bad_stores.py tests/e2e/test_cli_spine.py

typecheck: install
	$(BIN)/mypy

imports: install
	$(BIN)/lint-imports

# the code in README.md and docs/*.md is executed, and the docs' examples are checked
docs-check: install
	$(BIN)/pytest -q -p no:cacheprovider tests/unit/test_docs.py tests/unit/test_caching_doc.py tests/unit/test_strategies_doc.py

unit: install
	$(BIN)/pytest -q -p no:cacheprovider tests/unit tests/property

soak: install
	CTXLEDGER_SOAK=1 $(BIN)/pytest -q -p no:cacheprovider -m "slow or not slow" tests

# the compare tables of docs/trajectories.md, from the shared runs (../shared/trajectories)
docs-tables: install
	$(BIN)/python bench/trajectory_tables.py

# langchain-core is a benchmark-only peer (never a project dependency); without it the peer
# table says "not installed".
# `make bench` leaves the checkout as it is (results go to a temporary file it names);
# `make bench-docs` also writes bench/results.json and regenerates docs/performance.md.
bench: install
	-$(BIN)/pip install -q "langchain-core>=0.3" || echo "langchain-core not installed"
	$(BIN)/python bench/run.py

bench-docs: install
	-$(BIN)/pip install -q "langchain-core>=0.3" || echo "langchain-core not installed"
	$(BIN)/python bench/run.py --docs

# Benchmark-only environment for OpenHands' non-LLM condensers (openhands-ai 0.x needs
# Python >= 3.12; installing it takes several minutes). bench/run.py uses it when present.
bench-peers: install
	@set -e; PEERS_PY=""; \
	for c in python3.12 python3.13 $(HOME)/.pyenv/versions/3.12*/bin/python3.12 \
	         $(HOME)/.pyenv/versions/3.13*/bin/python3.13; do \
	  if $$c -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then PEERS_PY=$$c; break; fi; \
	done; \
	if [ -z "$$PEERS_PY" ]; then echo "bench-peers: no Python >= 3.12 found"; exit 1; fi; \
	$$PEERS_PY -m venv $(VENV)/peers; \
	$(VENV)/peers/bin/pip install -q "openhands-ai==0.62.0"

clean:
	rm -rf $(VENV) .venv-min build *.egg-info .mypy_cache .ruff_cache .ctxledger
