"""Invalidation contracts: safe cross-episode memory for LLM agents under server-side data drift."""

from importlib.metadata import PackageNotFoundError as _NotInstalled
from importlib.metadata import version as _version

try:
    __version__ = _version("invalidation-contracts")
except _NotInstalled:  # a source tree on sys.path, never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
