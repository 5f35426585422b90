"""Run a provider's existing validation code, unmodified, as a policy (issue 23, item 4).

A service written elsewhere validates with its own function over its own state (``cards``,
``travellers`` as dicts) and reports a failure by raising an exception whose message embeds the
fix ("card not registered; registered cards: c1, c2"). ``wrapped_policy`` calls that function
with **tracked views** in place of its state, so whatever it reads — keys looked up (absent ones
included), the key set it iterates, whole tables it scans — is the fix's dependency vector; and it
turns the exception's message into a suggestion through a small declarative table of
``ErrorRule`` patterns. A write to the state is refused with a ``PolicyError`` naming the table
and key (validation must not mutate reference data), or, with ``copy_on_write=True``, performed on
a throwaway copy the next call never sees.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from ..protocol.models import Action
from .faults import PolicyError
from .policies import FunctionPolicy, Violation
from .tables import thaw
from .tracking import TrackedTable, TrackedTables


@dataclass(frozen=True, slots=True)
class ErrorRule:
    """One line of the message → suggestion table.

    ``pattern`` is a regular expression searched in the exception's message; its named groups,
    and the request's string fields, fill the ``parameters`` templates (``"{cards[0]}"``: the first
    item of the comma-separated group ``cards``; see ``render``). ``scope`` names the request fields
    the fix
    is keyed on; ``origin_wide`` declares it valid for every request instead. ``precondition``
    names request fields a conditional rewrite assumes.
    """

    pattern: str
    type: str
    action: Action
    parameters: Mapping[str, str]
    scope: Sequence[str] = ()
    origin_wide: bool = False
    precondition: Sequence[str] = ()
    _compiled: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            compiled = re.compile(self.pattern)
        except re.error as exc:
            raise ValueError(
                f"error rule {self.type}: bad pattern {self.pattern!r}: {exc}"
            ) from None
        object.__setattr__(self, "_compiled", compiled)
        if self.origin_wide and self.scope:
            raise ValueError(
                f"error rule {self.type}: origin_wide with scope {list(self.scope)}; an "
                "origin-wide fix has no scope"
            )

    def match(self, message: str) -> dict[str, str] | None:
        found = self._compiled.search(message)
        if found is None:
            return None
        return {k: v for k, v in found.groupdict().items() if v is not None}

    def violation(
        self, message: str, groups: Mapping[str, str], request: Mapping[str, Any]
    ) -> Violation:
        values = {**{k: v for k, v in request.items() if isinstance(v, str)}, **groups}
        try:
            parameters = {name: render(t, values) for name, t in self.parameters.items()}
        except KeyError as exc:
            raise PolicyError(
                f"error rule {self.type}: template names {exc.args[0]!r}, which is neither a "
                f"group of its pattern nor a request field (message: {message!r})"
            ) from None
        return Violation(
            self.type,
            message,
            parameters,
            self.action,
            scope={name: request[name] for name in self.scope if name in request},
            precondition={name: request[name] for name in self.precondition if name in request},
            origin_wide=self.origin_wide,
        )


def render(template: str, values: Mapping[str, str]) -> str:
    """Fill ``{name}`` from ``values``; ``{name[0]}`` takes the first item of a comma list."""

    def one(found: re.Match[str]) -> str:
        name, index = found.group(1), found.group(2)
        value = values[name]
        if index is None:
            return value
        items = [item.strip() for item in value.split(",") if item.strip()]
        return items[int(index)]

    return re.sub(r"\{(\w+)(?:\[(\d+)\])?\}", one, template)


class _Refusing:
    """Write methods that raise a ``PolicyError`` naming the table and key (or copy, see below)."""

    __slots__ = ()

    def _refuse(self, key: object, what: str = "") -> PolicyError:
        table, row = self._where()
        at = f"key {key!r}" if row is None else f"key {row!r}, field {key!r}"
        return PolicyError(
            f"writes to table {table!r} ({at}{what}); validation code must not change reference "
            "data (wrapped_policy(..., copy_on_write=True) runs it on a throwaway copy)",
            table=table,
            field=None if row is None else str(key),
        )

    def _where(self) -> tuple[str, str | None]:
        raise NotImplementedError

    def __setitem__(self, key: object, value: object) -> None:
        raise self._refuse(key)

    def __delitem__(self, key: object) -> None:
        raise self._refuse(key, ", delete")

    def pop(self, key: object, *default: object) -> NoReturn:
        raise self._refuse(key, ", pop")

    def setdefault(self, key: object, default: object = None) -> NoReturn:
        raise self._refuse(key, ", setdefault")

    def update(self, *args: object, **kwargs: object) -> None:
        raise self._refuse("*", ", update")

    def clear(self) -> None:
        raise self._refuse("*", ", clear")

    def popitem(self) -> NoReturn:
        raise self._refuse("*", ", popitem")


class GuardedRow(_Refusing, Mapping[str, Any]):
    """A row of a tracked table as existing code sees it: readable, every write refused."""

    __slots__ = ("_key", "_row", "_table")

    def __init__(self, table: str, key: str, row: Mapping[str, Any]) -> None:
        self._table, self._key, self._row = table, key, row

    def _where(self) -> tuple[str, str | None]:
        return self._table, self._key

    def __getitem__(self, name: str) -> Any:
        return self._row[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._row)

    def __len__(self) -> int:
        return len(self._row)

    def __repr__(self) -> str:
        return f"GuardedRow({self._table}[{self._key!r}]={dict(self._row)!r})"


class _TableView(Mapping[str, Any]):
    """A mapping over a tracked table: its keys, membership and size are the table's; subclasses
    say what reading a row hands out."""

    __slots__ = ("_tracked",)

    def __init__(self, tracked: TrackedTable) -> None:
        self._tracked = tracked

    def __contains__(self, key: object) -> bool:
        return key in self._tracked

    def __iter__(self) -> Iterator[str]:
        return iter(self._tracked)

    def __len__(self) -> int:
        return len(self._tracked)


class GuardedTable(_Refusing, _TableView):
    """A tracked table as existing code sees it: reads recorded, every write refused."""

    __slots__ = ()

    def _where(self) -> tuple[str, str | None]:
        return self._tracked.name, None

    def __getitem__(self, key: str) -> Any:
        return GuardedRow(self._tracked.name, key, self._tracked[key])

    def get(self, key: str, default: object = None) -> Any:
        row = self._tracked.get(key)
        return default if row is None else GuardedRow(self._tracked.name, key, row)


class CopiedTable(_TableView):
    """``copy_on_write``: reads recorded; rows handed out as mutable copies, writes kept here."""

    __slots__ = ("_written",)

    def __init__(self, tracked: TrackedTable) -> None:
        super().__init__(tracked)
        self._written: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        row = self._tracked[key]
        if key not in self._written:
            self._written[key] = thaw(row)
        return self._written[key]

    def get(self, key: str, default: object = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __setitem__(self, key: str, value: object) -> None:
        self._written[key] = value


def wrapped_policy(
    name: str,
    check: Callable[..., Any],
    *,
    tables: Mapping[str, str],
    errors: Sequence[ErrorRule],
    raises: tuple[type[BaseException], ...] = (ValueError,),
    request_arg: str | None = "request",
    unmatched: str | None = None,
    copy_on_write: bool = False,
) -> FunctionPolicy:
    """A policy that calls ``check`` as it is.

    ``tables`` maps each of ``check``'s parameters to the reference table passed in its place
    (a tracked view). ``request_arg`` names the parameter that receives the request (None: none
    does). An exception of a type in ``raises`` is a failed validation: its message is matched
    against ``errors`` in order, and the first match becomes the violation. A message no rule
    matches is a ``PolicyError`` naming it, unless ``unmatched`` names a fix type for a refusal
    the client must not cache (``no_store``). Any other exception propagates (a provider bug).
    """
    params = inspect.signature(check).parameters
    wanted = [*tables, *([request_arg] if request_arg else [])]
    missing = [p for p in wanted if p not in params]
    if missing:
        raise ValueError(
            f"wrapped policy {name!r}: {check.__name__} has no parameter {missing[0]!r}"
        )
    rules = tuple(errors)

    def run(request: Mapping[str, Any], view: TrackedTables) -> Violation | None:
        kwargs: dict[str, Any] = {
            arg: CopiedTable(view[table]) if copy_on_write else GuardedTable(view[table])
            for arg, table in tables.items()
        }
        if request_arg:
            kwargs[request_arg] = dict(request)
        try:
            check(**kwargs)
        except raises as exc:
            message = str(exc)
            for rule in rules:
                groups = rule.match(message)
                if groups is not None:
                    return rule.violation(message, groups, request)
            if unmatched is None:
                raise PolicyError(
                    f"raised {type(exc).__name__}({message!r}), which no error rule matches"
                ) from None
            return Violation(unmatched, message, {}, Action.REWRITE_VALUE, no_store=True)
        return None

    run.__name__ = name
    return FunctionPolicy(name, run)
