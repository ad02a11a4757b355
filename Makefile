# Each target is one CLI call; `install` makes the virtual environment the others use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SCENARIO ?= workloads/scenarios/ch9-hetero-pd.toml

.PHONY: install test bench-pd plan bench clean

$(BIN)/harness: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,torch]'
	touch $@

install: $(BIN)/harness

test: install
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python -m pytest -q --benchmark-enable --benchmark-only tests

plan: install
	$(BIN)/harness model plan $(SCENARIO)

bench-pd: install
	$(BIN)/harness model plan $(SCENARIO)

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks
