# Two entry points (see README): `make sweep` and `make test`. Both set up .venv first.
# `make test-slow` runs the tests marked slow, which `make test` leaves out; CI runs both.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SWEEP_ARGS ?= --nodes 1 --suite quick

.PHONY: sweep test test-slow lint clean

# the one prerequisite make cannot install: Python >= 3.10 with venv (ensurepip included)
ifeq ($(filter clean,$(MAKECMDGOALS)),)
ifneq ($(shell $(PYTHON) -c 'import sys, venv, ensurepip; print(sys.version_info >= (3, 10))' 2>/dev/null),True)
$(error gpuprof needs Python >= 3.10 with the venv module; $(PYTHON) is not that (Debian/Ubuntu: apt-get install python3-venv; or make PYTHON=python3.11 ...))
endif
endif

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $@

sweep: $(BIN)/.installed
	$(BIN)/gpuprof sweep $(SWEEP_ARGS)

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

test: lint
	$(BIN)/pytest -m "not slow"

test-slow: $(BIN)/.installed
	$(BIN)/pytest -m slow

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
