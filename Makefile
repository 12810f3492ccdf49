# bunko — developer entry points. Each target bootstraps .venv from pyproject.toml on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
DEMO_DB := sqlite:///$(CURDIR)/.bunko/demo.db
DEMO_QUESTION ?= 水は何日分備蓄すればいいですか？

.PHONY: demo test test-browser lint bench bench-postgres bench-ingest clean help

help:
	@echo "make demo   ingest examples/docs and ask one question (prints a cited answer)"
	@echo "make test   run the whole test suite"
	@echo "make test-browser  only the web app's tests in Chromium (installs nothing; they skip without chromium)"
	@echo "make lint   ruff over src, tests and benchmarks; mypy over src; the layer contract; import circles"
	@echo "make bench  embedded-store benchmark at 10k and 100k chunks"
	@echo "make bench-postgres  PostgreSQL benchmark at 100k chunks (starts its own server)"
	@echo "make bench-ingest    ingest 1,000 mixed files with the bundled embedder"

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "bunko needs Python 3.11 or newer; run: make PYTHON=python3.11 ...")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/bunko --db $(DEMO_DB) ingest examples/docs --collection demo
	@echo
	@echo "Q: $(DEMO_QUESTION)"
	@echo
	$(BIN)/bunko --db $(DEMO_DB) ask "$(DEMO_QUESTION)" --collection demo

test: $(STAMP)
	$(BIN)/python -m pytest

# Runs only the browser tests and installs nothing: no venv bootstrap, no browser download.
test-browser:
	@test -x $(BIN)/python || { echo "no $(VENV) yet: run make test once (it creates it)"; exit 1; }
	$(BIN)/python -m pytest -m browser tests/test_webapp_browser.py tests/test_apidocs.py

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy
	PYTHONPATH=src $(BIN)/lint-imports
	$(BIN)/python tools/import_cycles.py src bunko

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_store.py --sizes 10000 100000

bench-postgres: $(STAMP)
	$(BIN)/python benchmarks/bench_postgres.py --n 100000

bench-ingest: $(STAMP)
	$(BIN)/python benchmarks/bench_ingest.py --files 1000

clean:
	rm -rf $(VENV) .bunko .pytest_cache .ruff_cache
