"""The Acme billing app over plain SQLite files: what the tests of a worker that follows SQL
tables written by other processes start from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI

from invalidation_contracts.domains import get_domain
from invalidation_contracts.server.http.app import create_app
from invalidation_contracts.server.sql import create_tables, sql_domain


def acme_on_sqlite(tmp_path: Path, **options: Any) -> tuple[FastAPI, Path]:
    """``create_app`` over Acme's tables in ``tmp_path/acme.db`` (created here) with its registry
    in ``tmp_path/registry.sqlite``; returns the app and the tables' database file."""
    acme = tmp_path / "acme.db"
    create_tables(f"sqlite:///{acme}", get_domain("acme_billing"))
    app = create_app(
        sql_domain(get_domain("acme_billing")),
        store=tmp_path / "registry.sqlite",
        database=f"sqlite:///{acme}",
        **options,
    )
    return app, acme
