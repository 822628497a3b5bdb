# Two commands on a fresh machine: `make demo` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# Tests start hundreds of Python processes (jobs, Spark's workers, the command
# line); letting them cache bytecode (some shells set PYTHONDONTWRITEBYTECODE)
# spares each one compiling distcal and the test modules again.
PYTEST  := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -p no:cacheprovider

.PHONY: install demo setup test test-fast lint bench clean system-deps zip

include mk/airflow.mk

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m distcal.demo

# distcal as one zip for spark-submit --py-files (executors need only numpy,
# pandas, pyarrow and scipy besides it).
zip: $(STAMP)
	$(BIN)/python -m distcal.packaging dist/distcal.zip

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# Debian's chromium and its driver for the report's browser test (browser
# downloads from elsewhere are not reachable; apt is), and Debian's PostgreSQL
# server, whose initdb/pg_ctl tests/test_export.py runs to execute exported SQL.
# Skipped when present.
system-deps:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ] || \
	    ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && \
	    $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver \
	        postgresql; \
	fi

# The project's venv (then lint), Airflow's venv and the browser are independent
# installs, mostly downloads and unpacking: side by side they take the time of
# the longest instead of the sum.
setup:
	$(MAKE) --no-print-directory -j3 --output-sync=target $(AIRFLOW_STAMP) system-deps lint

# Everything: lint and types, the whole suite (Spark, Dask clusters, Airflow,
# a browser, the 1 GB fixture, every README block) and the package's doctests.
test: setup
	$(PYTEST) -n 2 --dist loadfile --no-loadscope-reorder --durations=40 tests
	$(PYTEST) --doctest-modules distcal

# The development loop: no Spark, no Dask cluster, no large files, no new
# Python processes (about a minute on 2 cores).
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(PYTEST) -x -n 2 --dist loadfile --no-loadscope-reorder -m "not spark and not dask and not slow and not subprocess" --doctest-modules tests distcal

bench: $(STAMP)
	$(BIN)/python bench/local_isotonic.py 1000000

clean:
	rm -rf $(VENV) demo_output .pytest_cache test-artifacts dist
