# Shoal: two set-up commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test test-unit test-integration bench install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

## Start the embedded single broker on 127.0.0.1:9092 (data under ./data). Ctrl-C stops it.
run: $(STAMP)
	$(BIN)/shoal broker

## Install everything and run the whole suite (unit, protocol, integration).
test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit tests/protocol

test-integration: $(STAMP)
	$(BIN)/python -m pytest -q tests/integration

## Benchmarks (not part of CI): figures go to docs/benchmarks.md.
bench: $(STAMP)
	$(BIN)/python -m tests.bench.produce_consume

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
