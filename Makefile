# weaveplace: `make run` runs the quickstart, `make test` runs the test suite, `make test-fast`
# the tests that start neither Ray nor Spark and are not slow, `make lint` ruff and mypy.
# Both create .venv (Python 3.11) and install the project into it when missing or outdated.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export NUMBA_CACHE_DIR ?= $(CURDIR)/.cache/numba
export RAY_TMPDIR ?= /tmp/ray-weaveplace

.PHONY: venv venv-flink run test test-scenarios test-fast test-hosts lint bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/weaveplace warmup   # numba kernels (.cache/numba), Spark class archive (.cache/spark)
	@touch $(STAMP)

# Apache Flink for `weaveplace bench flink` only, in a venv of its own (.venv-flink): apache-flink
# pins pandas and pyarrow below weaveplace's (pyproject.toml, dependency group `flink`). Not part
# of `make venv`, `make test` or CI.
venv-flink:
	@test -x .venv-flink/bin/python || $(PYTHON) -m venv .venv-flink
	.venv-flink/bin/pip install --quiet --upgrade pip
	.venv-flink/bin/pip install --quiet --group flink

run: $(STAMP)
	$(BIN)/weaveplace quickstart

# Two pytest-xdist workers, a test module never split between them (its module fixtures are
# built once): most of the suite's wall time is waiting on Ray, Spark and CLI subprocesses,
# which two workers overlap (tests/conftest.py). Modules are handed out in collection order
# (tests/cluster, the long ones, first; the short ones fill the end), not xdist's default of
# most tests first, which leaves the one-test multi-minute modules for last.
# TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) -m "not hosts and not scenario" --durations=15

# The long end-to-end scenarios (marker `scenario`: a multi-node Ray cluster driven by a
# subprocess with every answer route, serve killed and resumed, serve attached to a `ray start`
# head, serve scaling with Ray's own autoscaler, the Spark SQL equality, serve's sliced, count-window
# and WG_PF runs, live load shedding, more fault drills, route variants and live-run checks): 15-20
# minutes that `make test` leaves out to stay under 8 minutes. CI runs them after `make test`.
test-scenarios: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) -m scenario --durations=15

# Faults across emulated hosts (network namespaces, root; tests/hosts): a Ray cluster of three
# hosts with their own IPs, crashes, hangs, partitions. Minutes; one test at a time.
test-hosts: $(STAMP)
	$(BIN)/python -m pytest -q -m hosts tests/hosts --durations=15

# The inner loop: no Ray, no Spark, nothing marked slow (markers in pyproject.toml), property
# tests with the dev hypothesis profile (few examples; tests/conftest.py). `make test` runs all
# of it with the ci profile's full counts.
test-fast: $(STAMP)
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-dev} $(BIN)/python -m pytest -q $(XDIST) -m "not cluster and not slow and not hosts"

# Style and types; mypy covers the packages with no Ray or Spark (config in pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy placement executors

bench: $(STAMP)
	$(BIN)/weaveplace bench f1

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis build *.egg-info
