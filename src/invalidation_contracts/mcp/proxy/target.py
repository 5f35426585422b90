"""The upstream a proxy fronts: a command it spawns (stdio) or a URL (streamable HTTP).

The upstream's origin (what its fixes are filed under) is ``mcp.origins.target_origin`` of the
target, so two upstreams never share fixes; its memory defaults to one SQLite file per origin
under the state directory: ``$XDG_STATE_HOME/invalidation-contracts/proxy/<name>-<hash>.sqlite``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from mcp import StdioServerParameters

from ...server.store.location import state_dir
from ..origins import target_origin

#: The folder of the state directory the proxy's memories are kept in by default.
PROXY_DIR = "proxy"


@dataclass(frozen=True, slots=True)
class UpstreamTarget:
    """An upstream MCP server: ``command`` (argv, spawned over stdio) or ``url``."""

    command: tuple[str, ...] = ()
    url: str | None = None
    cwd: str | None = None

    def __post_init__(self) -> None:
        if bool(self.command) == (self.url is not None):
            raise ValueError("give the upstream as a command or as a URL, not both or neither")
        if self.url is not None:
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"the upstream URL must be http(s)://HOST[:PORT]/PATH: {self.url}")

    @classmethod
    def of(cls, command: Sequence[str], url: str | None) -> UpstreamTarget:
        return cls(tuple(command), url)

    def server(self) -> StdioServerParameters | str:
        """What the SDK's ``Client`` connects to. A spawned upstream inherits this process's
        environment (a host sets the proxy's; the upstream needs the same)."""
        if self.url is not None:
            return self.url
        return StdioServerParameters(
            command=self.command[0], args=list(self.command[1:]), env=dict(os.environ), cwd=self.cwd
        )

    @property
    def origin(self) -> str:
        """The memory's key for this upstream."""
        if self.url is not None:
            origin = target_origin(self.url)
        else:
            origin = target_origin(
                StdioServerParameters(
                    command=self.command[0], args=list(self.command[1:]), cwd=self.cwd
                )
            )
        assert origin is not None  # a URL or a command always names one
        return origin

    @property
    def name(self) -> str:
        """How messages name the upstream: its URL, or its command line."""
        return self.url if self.url is not None else shlex.join(self.command)

    def default_memory(self) -> Path:
        """The memory file this upstream's fixes are kept in when ``--memory`` is not given."""
        digest = hashlib.sha256(self.origin.encode()).hexdigest()[:12]
        stem = self.url if self.url is not None else Path(self.command[0]).name
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("._")[:40] or "upstream"
        return state_dir() / PROXY_DIR / f"{slug}-{digest}.sqlite"
