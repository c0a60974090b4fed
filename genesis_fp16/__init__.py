"""genesis-fp16: a mixed-precision training daemon for Genesis agents' world models."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("genesis-fp16")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
