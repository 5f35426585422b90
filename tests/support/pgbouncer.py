"""PgBouncer in front of the suite's PostgreSQL server, on 127.0.0.1 (marker ``pgbouncer``).

Debian's ``pgbouncer`` binary (``apt-get install pgbouncer``; ``.ci/run`` installs it) runs
directly with a temporary ini: every database of the server behind it, ``auth_type = any`` (the
server's own credentials in the connection string), the given ``pool_mode``. As root it runs as
the owner of the server's socket directory (PgBouncer refuses root). Stopped by its pid.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.postgres import with_database
from tests.support.processes import stop

START_TIMEOUT_S = 15.0


class PgBouncerUnavailable(RuntimeError):
    """The binary is missing or did not start."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _owner(given: dict[str, str]) -> str:
    """Who PgBouncer runs as under root: the owner of the server's socket directory (it may
    reach the socket there), else ``nobody``."""
    import pwd

    host = given.get("host", "")
    if host.startswith("/") and Path(host).exists():
        return pwd.getpwuid(Path(host).stat().st_uid).pw_name
    return "nobody"


@contextmanager
def pgbouncer(server_url: str, pool_mode: str) -> Iterator[str]:
    """PgBouncer in ``pool_mode`` in front of the server of ``server_url``; yields a URL of the
    same database through it (another database: ``with_database``)."""
    binary = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if Path(p).exists()), None
    )
    if binary is None:
        raise PgBouncerUnavailable("pgbouncer is not installed (apt-get install pgbouncer)")
    from psycopg.conninfo import conninfo_to_dict

    given = conninfo_to_dict(server_url)
    target = " ".join(
        f"{name}={given[name]}" for name in ("host", "port", "user", "password") if name in given
    )
    port = _free_port()
    tmp = Path(tempfile.mkdtemp(prefix="ic-pgbouncer-"))
    tmp.chmod(0o777)
    ini = tmp / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"* = {target}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        "unix_socket_dir =\n"
        "auth_type = any\n"
        f"pool_mode = {pool_mode}\n"
        "max_client_conn = 500\n"
        "default_pool_size = 40\n"
        f"logfile = {tmp / 'pgbouncer.log'}\n"
        f"pidfile = {tmp / 'pgbouncer.pid'}\n"
    )
    ini.chmod(0o644)
    command = [binary, *(["-u", _owner(given)] if os.getuid() == 0 else []), str(ini)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                log = tmp / "pgbouncer.log"
                raise PgBouncerUnavailable(
                    f"pgbouncer exited {process.returncode}: "
                    + (log.read_text()[-2000:] if log.exists() else "")
                )
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise PgBouncerUnavailable("pgbouncer did not listen") from None
                time.sleep(0.05)
        name, user = given.get("dbname", "postgres"), given.get("user", "postgres")
        yield with_database(f"postgresql://{user}@127.0.0.1:{port}/postgres", name)
    finally:
        stop(process, grace_s=10)
        shutil.rmtree(tmp, ignore_errors=True)
