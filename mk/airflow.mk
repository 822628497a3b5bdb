# Airflow for the example DAGs in jobs/airflow/ and tests/test_airflow.py.
#
#   include mk/airflow.mk          (from the main Makefile)
#   make airflow-venv              creates $(AIRFLOW_VENV) once (a stamp file)
#
# Airflow gets a virtual environment of its own: it pins its dependencies
# tightly (SQLAlchemy, pendulum, ...) and must not move the project's. It
# lives inside $(VENV) so it is cached, and cleaned, with it. The jobs
# themselves run with the project's Python ($(BIN)/python), which the DAGs
# are told about through the Airflow Variable distcal_python.
#
# Airflow's own install method is a pip constraints file per Airflow and
# Python version; AIRFLOW_CONSTRAINTS may name the official one (a URL) where
# it can be reached, the default is the pinned set in requirements/airflow.txt.

PY      ?= python3
VENV    ?= .venv
BIN     ?= $(VENV)/bin

AIRFLOW_VENV          := $(VENV)/airflow
AIRFLOW_BIN           := $(AIRFLOW_VENV)/bin
AIRFLOW_STAMP         := $(AIRFLOW_VENV)/.installed
AIRFLOW_VERSION       ?= 3.3.2
AIRFLOW_SPARK_VERSION ?= 6.3.4
AIRFLOW_CONSTRAINTS   ?= requirements/airflow.txt

.PHONY: airflow-venv airflow-clean

# After the project's venv exists: it lives inside it, and two `venv` runs
# creating the same directory at once could collide.
$(AIRFLOW_STAMP): requirements/airflow.txt | $(BIN)/python
	test -x $(AIRFLOW_BIN)/python || $(PY) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_BIN)/python -m pip install --quiet --progress-bar off --upgrade pip
	$(AIRFLOW_BIN)/python -m pip install --quiet --progress-bar off \
	    --constraint $(AIRFLOW_CONSTRAINTS) \
	    "apache-airflow==$(AIRFLOW_VERSION)" \
	    "apache-airflow-providers-apache-spark==$(AIRFLOW_SPARK_VERSION)"
	$(AIRFLOW_BIN)/python -c "import airflow.providers.apache.spark, airflow.sdk"
	touch $@

airflow-venv: $(AIRFLOW_STAMP)

airflow-clean:
	rm -rf $(AIRFLOW_VENV)
