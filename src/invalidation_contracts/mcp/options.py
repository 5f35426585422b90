"""How a contract session follows a server: one frozen configuration every entry point takes.

``ContractSession``, ``connect`` and the framework adapters (PydanticAI's toolset, the Agents
SDK's servers, LangChain's, LlamaIndex's and ADK's tools) each take ``options=SessionOptions(...)``,
or the same names as keywords (``SessionKwargs``, typed: ``mypy --strict`` refuses a misspelt one),
so an option is spelt and documented once, here. The wrapped SDK's own keywords travel apart, in
one named mapping (``sdk={...}``), never mixed with the session's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, TypedDict, Unpack, cast

from .._deprecation import warn_moved
from ..client.events import MemoryEvent
from ..client.patching import ApplyMode, ApplyModeName

Listener = Callable[[MemoryEvent], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionOptions:
    """A contract session's options (each entry point's defaults are these)."""

    origin: str | None = None
    """The memory's key for this server. ``ContractSession`` requires one: a session does not
    say what it is connected to, and the name a server gives may be another's. ``connect`` and
    the adapters default it to the transport target (``mcp.origins.target_origin``);
    ``BY_SERVER_NAME`` asks for ``mcp://`` + the ``serverInfo`` name on purpose."""
    conditional: bool = True
    """Send the memory's position, so results carry only the tables moved since."""
    watch: bool = True
    """Follow ``resources/updated`` for the versions (eager detection without polling; only for
    strategies that invalidate)."""
    listener: Listener | None = None
    """Given every memory event, the ones notifications cause included."""
    watch_listener: Listener | None = None
    """Given only the events notifications cause (those of no call, e.g. an eviction between two
    episodes)."""
    apply: ApplyMode | ApplyModeName = ApplyMode.CLIENT
    """How the call hook uses the fixes: ``"client"`` patches them into the arguments,
    ``"model"`` (``ApplyMode.PLANNER``) leaves them to the model, which was shown them."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "apply", ApplyMode.parse(self.apply))

    @property
    def mode(self) -> ApplyMode:
        """``apply`` as an ``ApplyMode`` (a string given is parsed on construction)."""
        return ApplyMode.parse(self.apply)

    def but(self, **changes: Unpack[SessionKwargs]) -> SessionOptions:
        """A copy with ``changes``."""
        return replace(self, **changes) if changes else self


class SessionKwargs(TypedDict, total=False):
    """``SessionOptions`` as keyword arguments (``**kwargs: Unpack[SessionKwargs]``)."""

    origin: str | None
    conditional: bool
    watch: bool
    listener: Listener | None
    watch_listener: Listener | None
    apply: ApplyMode | ApplyModeName


#: The option names, for an entry point that passes the other keywords on (to the SDK).
OPTION_NAMES = frozenset(f.name for f in fields(SessionOptions))


def session_options(options: SessionOptions | None, changes: SessionKwargs) -> SessionOptions:
    """``options`` (default: the defaults) with ``changes`` applied."""
    return (options if options is not None else SessionOptions()).but(**changes)


def session_and_sdk(
    entry: str,
    options: SessionOptions | None,
    session: SessionKwargs,
    sdk: Mapping[str, Any] | None,
) -> tuple[SessionOptions, dict[str, Any]]:
    """The session's options (``options`` with ``session``'s names applied) and the keywords for
    the SDK ``entry`` wraps (``sdk``). A name in ``session`` that is no option is the mixed
    spelling of 0.1 (an SDK keyword beside the session's options): typed code cannot write it,
    and until ``REMOVED_IN`` it still goes to the SDK, with a ``DeprecationWarning``."""
    given: Mapping[str, object] = session
    stray = {k: v for k, v in given.items() if k not in OPTION_NAMES}
    if stray:
        names = ", ".join(sorted(stray))
        warn_moved(
            f"{entry}(..., {names}=...) beside the session's options",
            f"{entry}(..., sdk={{...}}) for the SDK's keywords",
            stacklevel=4,
        )
    mine = cast(SessionKwargs, {k: v for k, v in given.items() if k in OPTION_NAMES})
    return session_options(options, mine), {**stray, **(sdk or {})}


def split_options(
    options: SessionOptions | None, keywords: Mapping[str, Any]
) -> tuple[SessionOptions, dict[str, Any]]:
    """Deprecated: ``session_and_sdk`` (the SDK's keywords apart, in ``sdk=``)."""
    warn_moved("mcp.options.split_options", "mcp.options.session_and_sdk")
    mine = {k: v for k, v in keywords.items() if k in OPTION_NAMES}
    rest = {k: v for k, v in keywords.items() if k not in OPTION_NAMES}
    return session_options(options, cast(SessionKwargs, mine)), rest
