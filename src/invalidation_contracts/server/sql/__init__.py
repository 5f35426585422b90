"""Reference tables in the provider's own SQL database (SQLite, PostgreSQL), captured at the source.

Declare a table with :class:`SQLTable` in a ``Domain``; serve the domain with its database
(``create_app(domain, database=URL, store=...)`` or ``ContractService.open``). Policies read these
tables through the same read-tracking views as in-memory ones: the rows are loaded into immutable
snapshots, kept current by triggers that capture every committed write (``capture``), so a read
does no I/O. Needs the ``sql`` extra (and ``postgres`` for PostgreSQL).
"""

from __future__ import annotations

from ..._extras import missing

# The package's one guard: every module below may import SQLAlchemy (the ``sql`` extra).
try:
    import sqlalchemy  # noqa: F401
except ModuleNotFoundError as exc:
    raise missing(exc, "sql") from exc

from ..capture.steps import SourceError
from ..domain import SQLTable
from .declare import BoundTable, DeclarationError, bind
from .seed import create_tables, read_declarations, sql_domain
from .source import SQLSource

__all__ = [
    "BoundTable",
    "DeclarationError",
    "SQLSource",
    "SQLTable",
    "SourceError",
    "bind",
    "create_tables",
    "read_declarations",
    "sql_domain",
]
