# foxhunt-observability: render stacks offline, test, lint, benchmark.
# A .venv is created on first use from the exact pins in requirements.txt.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STACK ?= dev
STACKS := dev staging prod
PYTEST_ARGS ?=

.PHONY: render render-all test lint bench docs clean sysdeps venv dashboards-readme device-check device-check-deps

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements.txt
	touch $@

venv: $(VENV)/.installed

## render the stack offline (Pulumi mock engine) into rendered/$(STACK)/ and check it
render: sysdeps $(VENV)/.installed
	$(PY) -m infra.render --stack $(STACK)

render-all: sysdeps $(VENV)/.installed
	for s in $(STACKS); do $(PY) -m infra.render --stack $$s || exit 1; done

## Debian packages the tests need (Prometheus, Alertmanager, buildah, debootstrap, gcc); as root
sysdeps:
	./scripts/install-system-packages.sh

## the whole test suite (what CI runs)
test: sysdeps $(VENV)/.installed
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/actionlint

## benchmarks; figures go to BENCHMARKS.md
bench: $(VENV)/.installed
	$(PY) -m bench

## on a machine with an NVIDIA GPU: the poller against the real driver and nvidia-smi (builds nothing;
## needs python3 >= 3.11 with the poller's two packages, or build/device-check from device-check-deps)
device-check:
	$(PYTHON) scripts/device_check.py

## the poller's pinned packages into build/device-check/site (where a package registry is reachable)
device-check-deps:
	$(PYTHON) -m pip install --quiet --target build/device-check/site -r poller/requirements.txt

## regenerate dashboards/README.md (rows and panels of every dashboard) from the code
dashboards-readme: $(VENV)/.installed
	$(PY) -m dashboards.readme

clean:
	rm -rf rendered .pytest_cache .mypy_cache .ruff_cache
