"""Helpers that bring up the real components the suite tests against (PostgreSQL, ...)."""
