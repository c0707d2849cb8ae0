# Two commands set Sluice up on a fresh machine:
#   make demo   runs the demo pipeline on embedded local Spark
#   make test   runs the test suite
# Each creates .venv and installs Sluice into it on first use.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test test-fast lint bench clean java browser services cluster cluster-down

java:
	@scripts/check_java.sh

# headless Chromium for the dashboard's browser test (installed with apt-get when root)
browser:
	@scripts/check_browser.sh

# the services the connector tests talk to (PostgreSQL, Redis, NATS, Mosquitto, Kafka), installed
# with apt-get and started on loopback when missing; SLUICE_SKIP_SERVICES=1 leaves them to you
services:
	@scripts/start_services.sh || echo "services: see above: the tests of a service that is down will fail" >&2

$(STAMP): pyproject.toml
	@scripts/check_java.sh
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/sluice demo $(ARGS)

# lint first: a ruff or mypy finding in src fails the suite before any test runs
test: $(STAMP) browser services lint
	$(PY) -m pytest $(ARGS)

# the tests that need no Spark (not marked spark, taking no spark fixture) and are not slow
test-fast: $(STAMP) lint
	$(PY) -m pytest -m "not spark and not slow" $(ARGS)

# ruff (lint and format) over the whole repository and mypy over src (their configuration is in pyproject.toml)
lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks examples
	$(PY) -m ruff format --check src tests benchmarks examples
	$(PY) -m mypy

# every benchmark's quick mode in turn, alone on the machine (benchmarks/run_all.py; ARGS="--only a,b" or "--list")
bench: $(STAMP)
	$(PY) benchmarks/run_all.py --quick $(ARGS)

# a Spark standalone cluster on this machine (2 workers x 1 core): sluice run --master <its URL>
cluster: $(STAMP)
	$(VENV)/bin/sluice cluster up $(ARGS)

cluster-down: $(STAMP)
	$(VENV)/bin/sluice cluster down

clean:
	rm -rf $(VENV) .pytest_cache .sluice
