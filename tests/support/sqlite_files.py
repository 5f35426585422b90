"""A SQLite registry file copied aside and copied back: how an operator restores a backup."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path


def backup(db: Path, to: Path) -> None:
    """A consistent copy of ``db`` at ``to`` (SQLite's online backup)."""
    with closing(sqlite3.connect(db)) as source, closing(sqlite3.connect(to)) as target:
        source.backup(target)


def restore(copy: Path, db: Path) -> None:
    """``copy`` put back over ``db``, its WAL and shared-memory files gone with the old file."""
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(copy, db)
