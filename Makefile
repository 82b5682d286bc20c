# fedsched developer commands. `make test` sets everything up on a fresh machine and runs every check.

PYTHON_BOOT ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: help install lint typecheck imports unit test bench-log clean

help:
	@echo "make test       set up (venv, Kafka, PostgreSQL) and run lint, types, import contracts and all tests"
	@echo "make lint       ruff check and format check"
	@echo "make bench-log  fedsched bench log against a real Kafka and PostgreSQL"

$(STAMP): pyproject.toml
	$(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,lint,plot]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy events projections services connectors

imports: $(STAMP)
	$(VENV)/bin/lint-imports

test: lint typecheck imports
	PYTHON=$(abspath $(PY)) FEDSCHED_REQUIRE_REAL_SERVICES=1 deploy/local/with-services.sh \
		$(PY) -m pytest $(PYTEST_ARGS)

bench-log: $(STAMP)
	PYTHON=$(abspath $(PY)) deploy/local/with-services.sh sh -c \
		'$(VENV)/bin/fedsched bench log --kafka "$$FEDSCHED_TEST_KAFKA" --postgres "$$FEDSCHED_TEST_POSTGRES"'

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
