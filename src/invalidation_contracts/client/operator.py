"""Moved to ``invalidation_contracts.cli.operator``: the operator's view is the command line's
edge, not the memory's. Each name still imports from here, with a ``DeprecationWarning``, until
0.3.0."""

from .._deprecation import moved_names

_HOME = "invalidation_contracts.cli.operator"
_MOVED = {
    name: _HOME
    for name in (
        "OperatorError",
        "entries_table",
        "entry_rows",
        "evict",
        "opened",
        "origin_stats",
        "select_origins",
        "stats_table",
    )
}

__getattr__ = moved_names(__name__, _MOVED)
