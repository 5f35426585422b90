"""Two releases of the Acme domain for the deploy tests (issue 41): ``v2`` adds the table
``embargoes`` (its ``--declare`` file adds a column, ``promo_eligibility.region``)."""

from __future__ import annotations

from dataclasses import replace

from invalidation_contracts.domains import get_domain
from invalidation_contracts.server import Domain, SQLTable

V1_DECLARE = '[tables.promo_eligibility]\ncolumns = ["plans", "channel", "discount_pct"]\n'
V2_DECLARE = (
    '[tables.promo_eligibility]\ncolumns = ["plans", "channel", "discount_pct", "region"]\n'
)
MIGRATION = (
    "CREATE TABLE embargoes (country TEXT PRIMARY KEY, reason TEXT);"
    " INSERT INTO embargoes VALUES ('zz', 'sanctions');"
    " ALTER TABLE promo_eligibility ADD COLUMN region TEXT"
)
"""The new release's additive migration (plain SQL, as Alembic would run it)."""


def v2() -> Domain:
    """The new release: Acme with ``embargoes`` read from SQL."""
    acme = get_domain("acme_billing")
    return replace(acme, tables={**acme.tables, "embargoes": SQLTable("embargoes")})
