"""Where ``serve`` and ``serve-mcp`` keep a domain's history when no ``--db`` is given.

A history that dies with its process makes every client resync (a new epoch evicts everything)
and, before that, serve fixes from the history it replaced; stdio MCP hosts start a process per
session. So the commands keep one registry per domain in the user's state directory:
``$XDG_STATE_HOME/invalidation-contracts/<domain>.sqlite``, or
``~/.local/state/invalidation-contracts/<domain>.sqlite`` when ``XDG_STATE_HOME`` is unset (the XDG
base directory default, used on every platform). ``--ephemeral`` keeps a throw-away history in
memory instead.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from . import is_postgres_url

APP_DIR = "invalidation-contracts"


def state_dir() -> Path:
    """The user's state directory for this library (not created)."""
    base = os.environ.get("XDG_STATE_HOME", "").strip()
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".local" / "state"
    return root / APP_DIR


def default_registry(domain: str) -> Path:
    """The registry file a domain's history is kept in by default (its directory created)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", domain).strip(".") or "domain"
    folder = state_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder / f"{name}.sqlite"


def history_notice(target: str | None) -> str:
    """The line a serving command writes on stderr about the history it serves."""
    if target is None:
        return (
            "serving a throw-away history (--ephemeral): it ends with this process, and every "
            "agent's memory of this server is evicted when it restarts"
        )
    if is_postgres_url(target):
        return "keeping the history in the PostgreSQL database given by --db"
    if not Path(target).exists():
        return f"starting a new history at {target}"
    return f"continuing the history at {target}"
