# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint format install wheel docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel

# torch and torchvision come from the files on this machine's disk (see README);
# the package itself is installed editable with its dev extras.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q "torch==2.14.1" "torchvision==0.29.1"
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/reliacal demo

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check reliacal tests benchmarks examples docs .ci
	$(BIN)/ruff format --check reliacal tests benchmarks examples docs .ci

# The documentation site in docs/_build/html; any warning (a broken reference, a docstring
# that does not render, a gallery example that fails) fails the build, and so does a broken
# internal link or anchor of the built pages (checked offline: linkcheck needs the network).
docs: $(STAMP)
	$(BIN)/python -m sphinx -W --keep-going -n -q -b html docs docs/_build/html
	$(BIN)/python docs/check_links.py docs/_build/html

# Build the sdist and the wheel, install the wheel alone in a fresh venv, smoke-test it.
wheel: $(STAMP)
	.ci/check_wheel

format: $(STAMP)
	$(BIN)/ruff format reliacal tests benchmarks examples
	$(BIN)/ruff check --fix reliacal tests benchmarks examples

clean:
	rm -rf $(VENV) reliacal-demo .pytest_cache build dist docs/_build docs/api docs/auto_examples
