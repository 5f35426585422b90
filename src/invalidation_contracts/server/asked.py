"""What a domain request asks with besides its body: the client's contract position and its URI.

Each transport parses these from its own spelling (``Contract-Since`` and ``Contract-Epoch``
headers and the request path on HTTP, ``_meta`` on MCP) into one ``Asked``; the provider's
answer depends on nothing else of the request. Pure data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Asked:
    """A domain request's position and URI.

    ``since`` and ``epoch``: the client's ``Contract-Since`` and ``Contract-Epoch`` (None: it
    names no position and gets the full contract fields). ``instance``: the problem ``instance``
    of an answer that refuses it, or a function giving it (called only for a refusal, so a
    passing request does not pay for building it)."""

    since: int | None = None
    epoch: str | None = None
    instance: str | Callable[[], str] | None = None

    @property
    def conditional(self) -> bool:
        """Whether the client named a position (the contract fields then say only what moved)."""
        return self.since is not None

    def instance_uri(self) -> str | None:
        """``instance``, built now when it is a function."""
        return self.instance() if callable(self.instance) else self.instance


#: A request that names no position and no URI (an in-process call, a test).
PLAIN = Asked()
