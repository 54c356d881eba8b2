# Two entry points a fresh clone needs (see README): `make demo` and `make test`.
# Both create .venv and install the package on first use; nothing but Python 3.11+ is assumed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest-xdist workers of `make test`: 2 for the 2-core CI machine; `make test TEST_WORKERS=auto` takes every core
TEST_WORKERS ?= 2

.PHONY: setup demo test lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch is pinned: 2.13.0 is the CPU build; an unpinned torch pulls several GB of CUDA packages.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: setup
	$(BIN)/relaxspec demo

# The simulator's two entry kernels are compiled first, one per core (minutes on a cold cache, nothing when
# cached), so that the workers, and the processes their tests start, do not each compile them at once.
test: setup
	$(BIN)/relaxspec warm-up
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS)

lint: setup
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info
