# ttsq developer commands. `make dev` and `make test` are all a newcomer needs.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help setup dev test lint format bench bench-memory clean

help:
	@echo "make dev     set up .venv, start Redis + SeaweedFS S3 + worker + API + Flower, print URLs"
	@echo "make test    set up .venv, lint, run the whole suite against real services"
	@echo "make lint    ruff + mypy"
	@echo "make format  apply ruff's formatting and fixes"
	@echo "make bench   raw model limit vs the whole pipeline, latency, batching, long job (see docs/PERFORMANCE.md)"
	@echo "make bench-memory  10,000 segments through one worker: RSS growth after warm-up"
	@echo "make clean   remove .venv, .ttsq and caches"

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || \
		{ echo "ttsq needs Python 3.11; set PYTHON=/path/to/python3.11" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

setup: $(STAMP)

dev: setup
	$(BIN)/ttsq dev

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

test: lint
	$(BIN)/pytest

bench: setup
	$(BIN)/python -m bench.run

bench-memory: setup
	$(BIN)/python -m bench.run --sections memory

clean:
	rm -rf $(VENV) .ttsq .pytest_cache .mypy_cache .ruff_cache *.egg-info
