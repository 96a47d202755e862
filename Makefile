# Two commands set everything up on a fresh machine:
#   make run    the sidecar on an embedded SQLite file, with a worker and the bundled demo
#   make test   the whole test suite (PostgreSQL and MariaDB tests skip when those servers are absent)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/nrllm-sidecar: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

# tests/example_plugin is a separate package: the tests load it through its entry point, as a third-party
# plugin. Only the tests install it, so `make run` serves the sidecar without it.
EXAMPLE_PLUGIN := $(VENV)/.example-plugin-installed
$(EXAMPLE_PLUGIN): $(BIN)/nrllm-sidecar tests/example_plugin/pyproject.toml
	$(BIN)/pip install --quiet -e tests/example_plugin
	touch $@

.PHONY: install run test lint bench
install: $(BIN)/nrllm-sidecar

run: install
	$(BIN)/nrllm-sidecar serve --demo

test: install $(EXAMPLE_PLUGIN)
	$(BIN)/ruff check .
	$(BIN)/pytest -n 2 -q $(PYTEST_ARGS)

bench: install
	$(BIN)/python bench/run_all.py --quick
