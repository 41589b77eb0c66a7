# Two entry points that work on a fresh machine with only Python and pip.
#   make run   installs only what the simulator needs (no torch, no web stack), then runs the main job
#   make test  installs the dev, train and serve extras, then ruff and the whole test suite
# Installs are remembered by stamp files in the venv: a second call re-installs only if pyproject.toml changed.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= results/quickstart
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
NATIVE_STAMP := $(VENV)/.installed-native

.PHONY: run test venv lint bench native clean

$(BIN)/python:
	@echo "==> creating $(VENV)"
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	@echo "==> installing elastisched (simulator only: numpy, scipy, pandas, matplotlib, typer) into $(VENV)"
	$(BIN)/pip install --progress-bar on -e .
	@touch $@

$(DEV_STAMP): pyproject.toml | $(BIN)/python
	@echo "==> installing elastisched with the dev, train (torch, CPU), serve and ray extras into $(VENV)"
	$(BIN)/pip install --progress-bar on -e '.[dev,train,serve,ray]'
	@touch $@ $(RUN_STAMP)

venv: $(DEV_STAMP)

## make run: policy comparison on a bundled real workload (Pollux workload-6, 16x4 T4) -> $(OUT)/report.html
run: $(RUN_STAMP)
	@echo "==> simulating fifo, srtf, tiresias, optimus and elastisched on Pollux workload-6 (160 jobs, 16 nodes x 4 T4)"
	$(BIN)/elastisched sim compare --workload pollux:workload-6 --policies fifo,srtf,tiresias,optimus,elastisched --cluster 16x4:t4 --out $(OUT)
	@echo ""
	@echo "Report: $(OUT)/report.html  (tables and plots; per-policy folders hold summary.json, jobs.csv, timeline.csv)"
	@echo "Use the CLI:  source $(VENV)/bin/activate && elastisched --help"

## make test: lint + the whole test suite
test: venv
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/python -m pytest tests

$(NATIVE_STAMP): pyproject.toml | $(RUN_STAMP)
	@echo "==> installing Cython into $(VENV) for the compiled core"
	$(BIN)/pip install --progress-bar on -e '.[native]'
	@touch $@

## make native: the compiled core (optional; needs a C compiler): the simulator's hot modules compiled by Cython
## from their unchanged source, the same results with less CPU (docs/scale.md); ELASTISCHED_NATIVE=0 switches it off
native: $(NATIVE_STAMP)
	$(BIN)/python -m elastisched.native build

bench: venv
	$(BIN)/python benchmarks/sim_speed.py --out results/bench

clean:
	rm -rf $(VENV) results
