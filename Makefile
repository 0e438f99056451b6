# foxhunt-observability: render stacks offline, test, lint, benchmark.
# A .venv is created on first use from the locks: requirements.txt (the deploy set: the Pulumi
# program, the render, the policy pack) for render/diff/venv, requirements-dev.txt (the deploy set
# and the frameworks, test and lint tools) for everything else. Both pin every package with hashes.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STACK ?= dev
BASE ?= HEAD
DIFF_FORMAT ?= text
STACKS := $(shell python3 -m infra.stacks)
# Three test processes (pytest-xdist) on two cores: two share the suite, a module to one of them
# (--dist loadscope, so a module's fixtures, a live Prometheus, a dozen training programs, a promtool
# batch, are made once), and the third runs only the modules that mostly wait on real servers' clocks
# (the HA scenario, six minutes at a tenth of a core), which would otherwise hold a core idle
# (harness/waiting_apart.py). Override with PYTEST_ARGS= (one process) or PYTEST_ARGS="-n 4 -k rules".
# The 30 slowest tests are listed at the end.
PYTEST_ARGS ?= -n 3 --dist loadscope --durations=30

.PHONY: render render-all diff generate check test test-fast lint lock bench clean sysdeps venv device-check device-check-deps wheel

# --no-compile: modules are compiled when first imported (most of the providers' never are).
PIP_INSTALL := $(VENV)/bin/pip install --quiet --no-compile
LOCK := $(VENV)/bin/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links $(LOCK_ARGS)

$(VENV)/.deploy: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --require-hashes -r requirements.txt
	touch $@

$(VENV)/.dev: requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --require-hashes -r requirements-dev.txt
	touch $@

## the deploy set alone into .venv (what pulumi preview / up and the policy pack run in)
venv: $(VENV)/.deploy

## rewrite the locks from requirements.in and requirements-dev.in (LOCK_ARGS=--upgrade to move unpinned ones)
lock: $(VENV)/.dev
	$(LOCK) -o requirements.txt requirements.in
	$(LOCK) -o requirements-dev.txt requirements-dev.in

## the trainer library's wheel (what a training image installs) into dist/: prometheus-client and OpenTelemetry only
wheel: $(VENV)/.dev
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation --no-index --wheel-dir dist .

## render the stack offline (Pulumi mock engine) into rendered/$(STACK)/ and check it
render: sysdeps $(VENV)/.deploy
	$(PY) -m infra.offline.render --stack $(STACK)

## render every stack: the Pulumi.<stack>.yaml files present
render-all: sysdeps $(VENV)/.deploy
	for s in $(STACKS); do $(PY) -m infra.offline.render --stack $$s || exit 1; done

## review diff: render BASE (a git ref, default HEAD) and the working tree, print a per-file diff of rendered/$(STACK)/
diff: $(VENV)/.deploy
	@$(PY) -m infra.offline.review_diff --stack $(STACK) --base $(BASE) --format $(DIFF_FORMAT)

## Debian packages the tests need (Prometheus, Alertmanager, buildah, debootstrap, gcc); as root
sysdeps:
	./scripts/install-system-packages.sh

## rewrite every committed generated file from the code (runbooks, dashboards README)
generate: $(VENV)/.dev
	$(PY) -m infra.offline.regenerate

## what CI runs (.ci/run): generated files current and committed, lint, format, strict types, tests
check: sysdeps generate
	@stale=$$(git status --porcelain -- $$($(PY) -m infra.offline.regenerate --list)); \
	if [ -n "$$stale" ]; then \
	  echo "$$stale"; echo "generated files differ from the committed ones: commit what make generate wrote" >&2; \
	  exit 1; \
	fi
	$(MAKE) lint
	$(PY) -m pytest $(PYTEST_ARGS)

## the whole test suite
test: sysdeps $(VENV)/.dev
	$(PY) -m pytest $(PYTEST_ARGS)

## the edit loop: every test that starts no server or tool and runs no framework (-m "not slow")
test-fast: sysdeps $(VENV)/.dev
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

## ruff (lint and format), mypy strict, actionlint over the CI workflows
lint: $(VENV)/.dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/actionlint

## benchmarks; figures go to BENCHMARKS.md
bench: $(VENV)/.dev
	$(PY) -m bench

## on a machine with an NVIDIA GPU: the poller against the real driver and nvidia-smi (builds nothing;
## needs python3 >= 3.11 with the poller's two packages, or build/device-check from device-check-deps)
device-check:
	$(PYTHON) scripts/device_check.py

## the poller's pinned packages into build/device-check/site (where a package registry is reachable)
device-check-deps:
	$(PYTHON) -m pip install --quiet --target build/device-check/site -r poller/requirements.txt

clean:
	rm -rf rendered .pytest_cache .mypy_cache .ruff_cache
