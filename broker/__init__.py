"""Shoal's broker process."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("shoal")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"
