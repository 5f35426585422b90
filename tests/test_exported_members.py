"""Each public package's face: ``__all__`` is sorted and names exactly what the package exposes.

A package exposes what it binds without a leading underscore and defines itself or in one of its
submodules (not its submodules themselves, nor ``from __future__`` features, nor what it imports
from elsewhere: ``Any``, ``Path``, another package's classes): each of those names is in
``__all__``, and each name in ``__all__`` resolves (httpx's
tests/test_exported_members.py is the model). A new public package is one line in ``PACKAGES``; a
name a package binds on purpose without exporting it is spelt with an underscore
(``_moved_names``) or listed in ``NOT_EXPORTED`` with its reason.
"""

from __future__ import annotations
import __future__

import importlib
import types

import pytest

from invalidation_contracts._extras import MissingExtra

#: Every package with a public face (each ``__init__``), and the top-level modules users import.
PACKAGES = (
    "invalidation_contracts",
    "invalidation_contracts.adk",
    "invalidation_contracts.bench.metrics",
    "invalidation_contracts.bench.report",
    "invalidation_contracts.client",
    "invalidation_contracts.client.stores",
    "invalidation_contracts.domains",
    "invalidation_contracts.domains.acme_billing",
    "invalidation_contracts.domains.recipes",
    "invalidation_contracts.httpx",
    "invalidation_contracts.langchain",
    "invalidation_contracts.llama_index",
    "invalidation_contracts.mcp",
    "invalidation_contracts.observe",
    "invalidation_contracts.openai_agents",
    "invalidation_contracts.planners",
    "invalidation_contracts.planners.local",
    "invalidation_contracts.protocol",
    "invalidation_contracts.pydantic_ai",
    "invalidation_contracts.server",
    "invalidation_contracts.server.http",
    "invalidation_contracts.server.sql",
    "invalidation_contracts.server.store",
)

#: Modules whose extra the ``test`` extra cannot bring (docs/frameworks.md): skipped where it is
#: missing; tests/frameworks/test_adk_venv.py checks them in a venv of their extra.
OWN_VENV = frozenset({"invalidation_contracts.adk"})

#: Names a package binds that are no part of its face, each with why: ``{package: {name: why}}``.
NOT_EXPORTED: dict[str, dict[str, str]] = {}

#: Dunder names a face may export (httpx exports its version the same way).
EXPORTED_DUNDERS = frozenset({"__version__"})


#: Names bound by the usual imports, never a face's own.
PLUMBING = frozenset({"TYPE_CHECKING"})


def load(name: str) -> types.ModuleType:
    """``name`` imported; skipped when it is one of ``OWN_VENV`` and its extra is missing."""
    try:
        return importlib.import_module(name)
    except MissingExtra as exc:
        if name not in OWN_VENV:
            raise
        pytest.skip(str(exc))


def foreign(value: object, package: str) -> bool:
    """Whether ``value`` was defined outside ``package`` and its submodules (an import)."""
    home = getattr(value, "__module__", None)
    return isinstance(home, str) and home != package and not home.startswith(f"{package}.")


def exposed(module: types.ModuleType) -> list[str]:
    """The names ``module`` binds that a user sees as its own: no underscore, no submodule, no
    ``__future__`` feature, nothing imported from outside it."""
    skipped = NOT_EXPORTED.get(module.__name__, {})
    return sorted(
        name
        for name, value in vars(module).items()
        if (not name.startswith("_") or name in EXPORTED_DUNDERS)
        and not isinstance(value, types.ModuleType | __future__._Feature)
        and not foreign(value, module.__name__)
        and name not in PLUMBING.union(skipped)
    )


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted(name: str) -> None:
    module = load(name)
    assert module.__all__ == sorted(module.__all__)


@pytest.mark.parametrize("name", PACKAGES)
def test_all_names_everything_the_package_exposes(name: str) -> None:
    module = load(name)
    assert sorted(set(exposed(module)) - set(module.__all__)) == []


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_resolves(name: str) -> None:
    module = load(name)
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert missing == []
