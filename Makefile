# make run  - set up, then start the daemon on its embedded default
# make test - set up, then lint, type-check and run the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup setup-cuda run test lint typecheck unit bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev,bench]'
	touch $@

# A GPU host keeps its own CUDA torch: the venv sees the system site-packages, so pip finds
# that torch satisfies torch>=2.4 and installs only the rest (no constraints.txt, whose pin
# is the CPU wheel). Afterwards `make test` and `make run` use this venv as it is.
setup-cuda:
	$(PYTHON) -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'setup-cuda: $(PYTHON) has no CUDA torch (torch ' + torch.__version__ + '); use make setup')"
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	$(BIN)/python -c "import torch; assert torch.cuda.is_available(), torch.__version__"
	touch $(VENV)/.installed

run: setup
	$(BIN)/genesis-fp16 serve

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy

unit: setup
	$(BIN)/pytest

test: lint typecheck unit

bench: setup
	$(BIN)/genesis-fp16 bench

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
