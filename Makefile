# Two commands on a fresh machine: `make demo` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
PYTEST  := $(BIN)/python -m pytest -q -p no:cacheprovider

.PHONY: install demo test test-fast lint typecheck bench zip clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m distcal.demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# Everything: lint and types, the whole suite (Spark, Dask clusters, the 1 GB
# fixture, every README block) and the package's doctests.
test: $(STAMP) lint
	$(PYTEST) tests
	$(PYTEST) --doctest-modules distcal

# The development loop: no Spark, no Dask cluster, no large files (under a minute).
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(PYTEST) -x -n 2 -m "not spark and not dask and not slow" tests
	$(PYTEST) --doctest-modules distcal

bench: $(STAMP)
	$(BIN)/python bench/local_isotonic.py 1000000

clean:
	rm -rf $(VENV) demo_output .pytest_cache
