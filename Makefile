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

# tests/example_plugin is a separate package that the tests load through its entry point, as a third-party
# plugin, without installing it (tests/support/plugin_site.py): `make run` serves the sidecar without it. Older
# checkouts installed it into .venv; take it out again if it is there.
EXAMPLE_PLUGIN_REMOVED := $(VENV)/.example-plugin-removed
$(EXAMPLE_PLUGIN_REMOVED): $(BIN)/nrllm-sidecar
	$(BIN)/pip uninstall --quiet --yes nrllm-example-plugin 2>/dev/null || true
	touch $@

.PHONY: install run test lint bench
install: $(BIN)/nrllm-sidecar $(EXAMPLE_PLUGIN_REMOVED)

run: install
	$(BIN)/nrllm-sidecar serve --demo

test: install
	$(BIN)/ruff check .
	$(BIN)/pytest -n 2 -q $(PYTEST_ARGS)

bench: install
	$(BIN)/python bench/run_all.py --quick
