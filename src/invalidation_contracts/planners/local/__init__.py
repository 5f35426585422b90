"""Local models for planning: llama.cpp (``xllamacpp``) serving a GGUF file on 127.0.0.1.

:mod:`.models` names the models and pins their digests, :mod:`.assembly` brings a named model
into the cache and verifies it, :mod:`.server` runs and shares the server processes, and
:mod:`.planner` is the ``local:`` planner. Only :mod:`.planner` and the server child need the
``local`` extra; the rest is standard library.
"""

from ..._extras import lazy_exports
from .assembly import ModelIntegrityError, cache_dir, ensure_model, resolve_model
from .models import MODELS, ChunkPackage, NamedModel
from .server import POOL, LlamaServer, ServerConfig, ServerPool

__all__ = [
    "ChunkPackage",
    "LlamaServer",
    "LocalPlanner",
    "MODELS",
    "ModelIntegrityError",
    "NamedModel",
    "POOL",
    "ServerConfig",
    "ServerPool",
    "cache_dir",
    "ensure_model",
    "resolve_model",
]


__getattr__ = lazy_exports(__name__, {"LocalPlanner": ".planner"})
"""``LocalPlanner`` is imported on first use: it needs the ``local`` extra."""
