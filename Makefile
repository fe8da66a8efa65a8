# Shoal: two set-up commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run dev-cluster test test-fast lint test-unit test-integration sim sim-long bench soak install clean

# Also installs kafkajs (tests/js) for tests/integration/test_kafkajs.py, which skip without
# node/npm, but fail when CI=true.
# `pip install -e` also builds the C extension (setup.py: broker/protocol/_records.c) in place:
# a change to it reinstalls.
$(STAMP): pyproject.toml setup.py broker/protocol/_records.c tests/js/package.json tests/js/package-lock.json
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,lint,tiering]'
	if command -v npm >/dev/null 2>&1; then \
		cd tests/js && npm ci --no-audit --no-fund; \
	else \
		echo "npm not found: kafkajs tests will skip (and fail when CI=true)" >&2; \
	fi
	touch $(STAMP)

install: $(STAMP)

## Start the embedded single broker on 127.0.0.1:9092 (data under ./data). Ctrl-C stops it.
run: $(STAMP)
	$(BIN)/shoal broker

## etcd, an S3 endpoint (moto) and 3 brokers in az1..az3 on loopback; prints the bootstrap
## addresses (all, and per AZ). Ctrl-C stops everything. More: `shoal dev cluster --help`.
dev-cluster: $(STAMP)
	bash .ci/install-etcd
	$(BIN)/shoal dev cluster --brokers 3 --azs 3

## Install everything (etcd-server, a Java 17 runtime for Spark and promtool for the alert
## rules from Debian's packages when missing, pyspark from PyPI), lint, and run the whole
## suite. `.ci/run` runs it with CI=true: a missing etcd, moto server or node/kafkajs then fails
## the tests that need it instead of skipping them (tests/gates.py). No test asserts a duration.
## TEST_JOBS xdist workers run it (most of an integration test is waiting on processes and
## sockets): each test module runs whole on one worker, simulation chunks anywhere.
TEST_JOBS ?= 4
test: $(STAMP) lint
	bash .ci/install-etcd
	bash .ci/install-java
	bash .ci/install-promtool
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_JOBS) --dist loadgroup

## Static checks (settings in pyproject.toml): ruff's formatting and its rules (errors such as
## unused imports and undefined names; the banned time/random/uuid APIs), mypy on broker/ and
## walfiles/, import-linter's contracts (layers, nothing but the entry point imports the
## composition root, no cycles). `.venv/bin/ruff format .` fixes the formatting.
lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

## The inner loop: unit, protocol and contract tests in TEST_JOBS workers, then a simulation
## smoke (the first two seeds of every scenario, 2 processes). No lint, no integration tests,
## no full seed counts: `make test` before a commit. docs/testing.md has its time here.
test-fast: $(STAMP)
	bash .ci/install-etcd
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_JOBS) --dist loadgroup tests/unit tests/protocol tests/contract tests/sim --ignore=tests/sim/test_scenarios.py
	PYTHONHASHSEED=0 $(BIN)/python -m tests.sim --scenario all --seeds 0..2 --jobs 2

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit tests/protocol

test-integration: $(STAMP)
	bash .ci/install-etcd
	$(BIN)/python -m pytest -q tests/integration

## Simulations (tests/sim): SEEDS (N, A..B exclusive, A..=B, or a comma list) of SCENARIO
## (a name, a comma list, or all) in JOBS processes, with the hash seed fixed so a failure
## replays exactly: `make sim SCENARIO=diskless_write SEEDS=1234 SIMFLAGS=--verbose`.
## `make test` runs each scenario's own (smaller) seed count.
SEEDS    ?= 0..20000
SCENARIO ?= all
JOBS     ?= 2
SIMFLAGS ?=
sim: $(STAMP)
	PYTHONHASHSEED=0 $(BIN)/python -m tests.sim --scenario $(SCENARIO) --seeds $(SEEDS) --jobs $(JOBS) $(SIMFLAGS)

## Fresh seeds of every scenario until HOURS simulated hours are covered (issue 28 item 7;
## overnight, not part of CI): `make sim-long HOURS=1000 JOBS=2`.
HOURS ?= 1000
sim-long: $(STAMP)
	PYTHONHASHSEED=0 $(BIN)/python -m tests.sim.long --hours $(HOURS) --jobs $(JOBS)

## Benchmarks (not part of CI): figures go to docs/benchmarks.md. The diskless one starts
## moto and tests/s3proxy.py (20 ms per PUT, 10 ms per GET) on loopback.
bench: $(STAMP)
	$(BIN)/python -m tests.bench.produce_consume
	$(BIN)/python -m tests.bench.groups
	$(BIN)/python -m tests.bench.diskless
	$(BIN)/python -m tests.bench.untuned
	$(BIN)/python -m tests.bench.untuned --only kafka-python --records 50000
	$(BIN)/python -m tests.bench.cluster
	$(BIN)/python -m tests.bench.partitions
	$(BIN)/python -m tests.bench.failover_scale
	$(BIN)/python -m tests.bench.metadata_scale
	$(BIN)/python -m tests.bench.partition_load
	$(BIN)/python -m tests.bench.fetch_fanout
	$(BIN)/python -m tests.bench.az
	$(BIN)/python -m tests.bench.walgc
	$(BIN)/python -m tests.bench.tiering
	$(BIN)/python -m tests.bench.transactions
	$(BIN)/python -m tests.bench.validator

## An hour under faults (issue 28 item 7; not part of CI): 3 brokers in 3 AZs plus a stateless
## one per AZ, etcd, moto behind tests/s3proxy.py, 5,000 partitions, producers, a group and a
## reader, a broker killed every 5 minutes; exits 1 if the auditor or the trends found anything.
## `make soak SOAKFLAGS="--minutes 10 --partitions 1000"` for a shorter one.
SOAKFLAGS ?=
soak: $(STAMP)
	$(BIN)/python -m tests.bench.soak $(SOAKFLAGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .import_linter_cache .grimp_cache
