# The common actions, one word each. Everything installs into .venv from pyproject.toml.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
REGISTRY := $(VENV)/bin/registry

.PHONY: install demo test lint bench bench-tuning clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

# Tune a small model built in code into the embedded SQLite registry, then show what is stored.
demo: install
	$(PY) -m registry.tvm_side.demo
	$(REGISTRY) lookup --model demo-mlp
	$(REGISTRY) stats

test: install
	$(VENV)/bin/pytest -q

lint: install
	$(VENV)/bin/ruff check registry cli migrations tests bench
	$(VENV)/bin/ruff format --check registry cli migrations tests bench

# The store benchmark: minutes, not seconds. See docs/BENCHMARKS.md.
bench: install
	$(PY) bench/store_bench.py

# registry tune against plain tune_relax: about 25 minutes on 2 cores. See docs/BENCHMARKS.md.
bench-tuning: install
	$(PY) -m pip install -q -e '.[dev,bench]'
	$(PY) bench/tuning/run.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
