# make run  - set up what running needs (no dev/bench extras), then start the daemon
# make test - set up with the dev and bench extras, then lint, type-check and run the whole test suite
# make test-fast - the same without the distributed tier (-m "not distributed")
# make dist - build the wheel and the sdist into dist/ (python -m build)
# make gpu-check - on a CUDA host: the gpu-marked tests (one process per file), both agents'
#                  training on cuda (and se_darwin on the host's cpu), a forced overflow
#                  replayed, a 100k pool read, the GPU-against-CPU benchmark, the bench's
#                  CUDA rows and the memory table, in <= 6 minutes; one line per check;
#                  results to benchmarks/results/gpu-check_<device>.md and .json
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Where torch comes from besides pip's index: PyPI's Linux torch is the CUDA build (GBs);
# TORCH_INDEX=https://download.pytorch.org/whl/cpu gets the CPU wheel (README).
TORCH_INDEX ?=
TORCH_FROM := $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))

.PHONY: setup setup-run setup-cuda run test test-fast lint typecheck unit bench dist gpu-check clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH_FROM) -c constraints.txt -e '.[dev,bench]'
	touch $@

# The daemon's own dependencies only: `make run` needs neither the test tools nor the
# benchmark frameworks. A venv that already has the dev set-up satisfies it as it is.
setup-run: $(VENV)/.installed-run

$(VENV)/.installed-run: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH_FROM) -c constraints.txt -e .
	touch $@

# A GPU host keeps its own CUDA torch: the venv sees the system site-packages, and the only
# constraint is that torch's own version, so pip keeps it, or stops ("conflict") when it is
# outside pyproject's torch range instead of downloading another torch. No constraints.txt:
# its pins of torch's dependencies fit torch 2.13, not every host's torch. Afterwards
# `make test` and `make run` use this venv as it is.
setup-cuda:
	$(PYTHON) -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'setup-cuda: $(PYTHON) has no CUDA torch (torch ' + torch.__version__ + '); use make setup')"
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(BIN)/python -c "import torch; print('torch==' + torch.__version__)" > $(VENV)/host-torch.txt
	$(BIN)/python -m pip install -q -c $(VENV)/host-torch.txt -e '.[dev,bench]'
	$(BIN)/python -c "import torch; assert torch.cuda.is_available(), torch.__version__"
	touch $(VENV)/.installed

run: setup-run
	$(BIN)/genesis-fp16 serve

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# agents/ and infrastructure/ are source roots (pyproject's mypy_path) holding the packages
# under their import names, so mypy follows every import without links.
typecheck: setup
	$(BIN)/mypy

# The suite in parallel (pytest-xdist): a worker per core, each test file on one worker so
# its module fixtures are built once, and one torch thread per process. The suite's models
# are tiny: a second intra-op thread per worker fights the other worker for the core rather
# than help (test_cli_train.py + test_retraining.py, -n 2 on 2 cores: 103 s of CPU with
# one thread, 150 s with two). TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= auto
# A pytest -m expression; empty runs every test.
TEST_MARKERS ?=
# The 30 slowest tests close the report: the suite's time is a budget (CI stops at 90
# minutes) and its log says where it goes.
unit: setup
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --durations=30 $(if $(TEST_MARKERS),-m "$(TEST_MARKERS)")

test: lint typecheck unit

# The tests marked `distributed` start a torch.distributed group of two or more processes
# (gloo ranks, torchrun): the slowest tests of the suite. test-fast leaves them out for a
# quicker loop while working; make test, and so CI (.ci/run), runs them.
test-fast: TEST_MARKERS = not distributed
test-fast: lint typecheck unit

bench: setup
	$(BIN)/genesis-fp16 bench

# The wheel and the sdist that docs/operations.md, the systemd unit and the Dockerfile
# install; `build` comes with the dev extra.
dist: setup
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

# No set-up step: `make setup` would pin the CPU torch. The interpreter is the venv's when
# there is one (make setup-cuda), else $(PYTHON): a bare GPU host with the package installed
# beside its own CUDA torch (pip install --no-deps -e .). Without CUDA: one line, exit 1.
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
GPU_CHECK_OUT ?= benchmarks/results
# A piece again: make gpu-check GPU_CHECK_ARGS='--only tests' (or --skip bench,compile).
GPU_CHECK_ARGS ?=

gpu-check:
	@$(GPU_PYTHON) tests/gpu_check.py --out $(GPU_CHECK_OUT) $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build dist
