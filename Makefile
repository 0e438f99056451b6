# foxhunt-observability: render stacks offline, test, lint, benchmark.
# A .venv is created on first use from the exact pins in requirements.txt.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STACK ?= dev
BASE ?= HEAD
DIFF_FORMAT ?= text
STACKS := $(shell python3 -m infra.stacks)
PYTEST_ARGS ?=

.PHONY: render render-all diff test lint bench docs clean sysdeps venv dashboards-readme

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements.txt
	touch $@

venv: $(VENV)/.installed

## render the stack offline (Pulumi mock engine) into rendered/$(STACK)/ and check it
render: sysdeps $(VENV)/.installed
	$(PY) -m infra.render --stack $(STACK)

## render every stack: the Pulumi.<stack>.yaml files present
render-all: sysdeps $(VENV)/.installed
	for s in $(STACKS); do $(PY) -m infra.render --stack $$s || exit 1; done

## review diff: render BASE (a git ref, default HEAD) and the working tree, print a per-file diff of rendered/$(STACK)/
diff: $(VENV)/.installed
	@$(PY) -m infra.review_diff --stack $(STACK) --base $(BASE) --format $(DIFF_FORMAT)

## Debian packages the tests need (Prometheus, Alertmanager, buildah, debootstrap, gcc); as root
sysdeps:
	./scripts/install-system-packages.sh

## the whole test suite (what CI runs)
test: sysdeps $(VENV)/.installed
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/actionlint

## benchmarks; figures go to BENCHMARKS.md
bench: $(VENV)/.installed
	$(PY) -m bench

## regenerate dashboards/README.md (rows and panels of every dashboard) from the code
dashboards-readme: $(VENV)/.installed
	$(PY) -m dashboards.readme

clean:
	rm -rf rendered .pytest_cache .mypy_cache .ruff_cache
