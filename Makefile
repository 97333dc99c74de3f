# Two commands do all of it: `make demo` and `make test`. Each builds .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test typecheck bench clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/shadowtrial demo

# The suite runs in pytest-xdist workers (tests/conftest.py says which tests share one worker):
# most tests wait on loopback servers, child processes and timers, so more workers than
# cores pay off. `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 4
test: typecheck
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

typecheck: $(STAMP)
	$(BIN)/python -m mypy

bench: $(STAMP)
	$(BIN)/python bench/bootstrap.py
	$(BIN)/python bench/tap.py

clean:
	rm -rf $(VENV) build *.egg-info
