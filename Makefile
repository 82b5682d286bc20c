# fedsched developer commands. `make test` sets everything up on a fresh machine and runs every check.

PYTHON_BOOT ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: help install run demo lint typecheck imports unit test soak bench-log bench-e2e bench-projections clean

help:
	@echo "make run        the whole service on its embedded default (no Kafka needed): fedsched up"
	@echo "make demo       fedsched up plus a replay of a real trace through the API, then audit verify"
	@echo "make test       set up (venv, Kafka, PostgreSQL, kube-apiserver, Slurm) and run lint, types, import contracts and all tests"
	@echo "make soak       the kill-anything soak at full size (10,000 submissions, its own Kafka and PostgreSQL)"
	@echo "make lint       ruff check and format check"
	@echo "make bench-log  fedsched bench log against a real Kafka and PostgreSQL"
	@echo "make bench-e2e  gRPC submit -> Kafka -> scheduler -> JobPlaced latency, and the verify rate"
	@echo "make bench-projections  projection events/s through faust and the in-process runner"

$(STAMP): pyproject.toml
	$(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,lint,plot]'
	$(PY) -m services.api.codegen
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/fedsched up

demo: $(STAMP)
	$(VENV)/bin/fedsched demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy events projections services connectors

imports: $(STAMP)
	$(VENV)/bin/lint-imports

test: lint typecheck imports
	PYTHON=$(abspath $(PY)) FEDSCHED_REQUIRE_REAL_SERVICES=1 deploy/local/with-services.sh \
		$(PY) -m pytest -m "not known_defect" $(PYTEST_ARGS)

soak: $(STAMP)
	FEDSCHED_SOAK_SIZE=$${FEDSCHED_SOAK_SIZE:-10000} $(PY) -m pytest tests/soak -m soak -s $(PYTEST_ARGS)

bench-log: $(STAMP)
	PYTHON=$(abspath $(PY)) deploy/local/with-services.sh sh -c \
		'$(VENV)/bin/fedsched bench log --kafka "$$FEDSCHED_TEST_KAFKA" --postgres "$$FEDSCHED_TEST_POSTGRES"'

bench-e2e: $(STAMP)
	PYTHON=$(abspath $(PY)) deploy/local/with-services.sh sh -c \
		'$(VENV)/bin/fedsched bench e2e --kafka "$$FEDSCHED_TEST_KAFKA" --postgres "$$FEDSCHED_TEST_POSTGRES"'

bench-projections: $(STAMP)
	PYTHON=$(abspath $(PY)) deploy/local/with-services.sh sh -c \
		'$(VENV)/bin/fedsched bench projections --kafka "$$FEDSCHED_TEST_KAFKA" --postgres "$$FEDSCHED_TEST_POSTGRES"'

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
