"""xdist's ``--dist loadfile`` with the longest files first, so that the workers end together.

xdist hands a worker a whole file at a time, the files with most items first; a file of one
grid-sized study (minutes) then starts last and runs alone at the end. ``LONG_FILES`` (measured:
a run's ``--durations``) start first, in their order; every other file keeps xdist's order.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from xdist.scheduler import LoadFileScheduling

#: Files whose items take minutes (the paper grid, the real model, the without-contract grid,
#: the ladder), longest first.
LONG_FILES = (
    "tests/docs/test_docs_commands.py",
    "tests/real_model/test_local_model.py",
    "tests/docs/test_without_contract.py",
    "tests/docs/test_docs_figures.py",
    "tests/real_model/test_local_model_tau2.py",
)


def rank(scope: str) -> int:
    """Where a file (xdist's scope) goes: its place in ``LONG_FILES``, else after them."""
    return LONG_FILES.index(scope) if scope in LONG_FILES else len(LONG_FILES)


class LongFilesFirst(LoadFileScheduling):
    """``LoadFileScheduling`` whose work queue starts with ``LONG_FILES``."""

    _ordered = False

    def _assign_work_unit(self, node: Any) -> None:
        if not self._ordered:  # the queue is complete before the first file is handed out
            self.workqueue = OrderedDict(sorted(self.workqueue.items(), key=lambda s: rank(s[0])))
            self._ordered = True
        super()._assign_work_unit(node)
