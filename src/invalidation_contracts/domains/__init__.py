"""The reference domains, each a package built only on the public provider API.

``get_domain(name)`` returns the :class:`~invalidation_contracts.server.Domain` that ``Provider``
and ``create_app`` serve; ``get_catalog(name)`` adds what a harness drives it with (task families,
drift snapshots, rule sets, the base system prompt and the evaluator oracle).

Names: ``acme_billing`` (payments streams), ``acme_rules`` (the same API under the rules stream's
declarations) and ``recipes``. Each call builds a fresh domain (and, for Acme, a fresh in-memory
payments ledger unless the environment selects another backend).
"""

from __future__ import annotations

from collections.abc import Callable

from invalidation_contracts.server import Domain

from .catalog import DomainCatalog, TaskFamily


def _acme_billing() -> DomainCatalog:
    from .acme_billing import catalog

    return catalog()


def _acme_rules() -> DomainCatalog:
    from .acme_billing import rules_catalog

    return rules_catalog()


def _recipes() -> DomainCatalog:
    from .recipes import catalog

    return catalog()


_CATALOGS: dict[str, Callable[[], DomainCatalog]] = {
    "acme_billing": _acme_billing,
    "acme_rules": _acme_rules,
    "recipes": _recipes,
}


def available_domains() -> list[str]:
    """The names ``get_domain`` and ``get_catalog`` accept, sorted."""
    return sorted(_CATALOGS)


def get_catalog(name: str) -> DomainCatalog:
    """A fresh catalog of the domain ``name``; KeyError naming the known domains otherwise."""
    try:
        factory = _CATALOGS[name]
    except KeyError:
        raise KeyError(
            f"unknown domain {name!r}; known: {', '.join(available_domains())}"
        ) from None
    return factory()


def get_domain(name: str) -> Domain:
    """A fresh instance of the domain ``name`` (what ``Provider`` and ``create_app`` take)."""
    return get_catalog(name).domain


__all__ = ["DomainCatalog", "TaskFamily", "available_domains", "get_catalog", "get_domain"]
