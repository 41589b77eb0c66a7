# Two entry points that work on a fresh machine with only Python and pip.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= results/quickstart

.PHONY: run test venv lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

venv: $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,train,serve]'

## make run: policy comparison on a bundled real workload (Pollux workload-6, 16x4 T4) -> $(OUT)/report.html
run: venv
	$(BIN)/elastisched sim compare --workload pollux:workload-6 --policies fifo,srtf,tiresias,optimus --cluster 16x4:t4 --out $(OUT)

## make test: lint + the whole test suite
test: venv
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/python -m pytest tests

bench: venv
	$(BIN)/python benchmarks/sim_speed.py --out results/bench

clean:
	rm -rf $(VENV) results
