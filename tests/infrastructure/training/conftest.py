"""The training tests' shared helpers, ``guard_faults.py`` and ``last_step_child.py``, for
the tests in every subfolder: pytest's default (prepend) import mode puts a conftest's folder
on ``sys.path``, so ``from guard_faults import FaultTask`` works from run/ and flight/ alike,
as tests/genesis_fp16/conftest.py does for ``daemon_harness``."""
