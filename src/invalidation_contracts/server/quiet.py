"""A polling round that reads nothing when nothing changed (SQLite): each database a follower
polls offers a cheap probe (``change_probe()``: ``PRAGMA data_version`` on SQLite) that moves on
every commit. A round whose probes all read what they read before the last full round, less than
a heartbeat after it, with no reconciliation due, confirms the worker current without reading the
registry or the capture: nobody committed since a round that read them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .capture.source import ChangeSource, CommitProbe


class QuietCheck:
    """The probes of the databases a polling follower reads, and what they said last time."""

    def __init__(self, owners: Sequence[object], heartbeat_s: float) -> None:
        """``owners``: the databases polled (the registry's store, each source); any without a
        ``change_probe`` means every round reads."""
        self._owners = owners
        self.heartbeat_s = heartbeat_s
        self._probes: list[CommitProbe] | None = None
        self._seen: tuple[int, ...] | None = None
        self._full_at = float("-inf")

    def unchanged(self, now: float, sources: Sequence[ChangeSource]) -> bool:
        """Whether the round starting at ``now`` may confirm without reading (see the module).

        Otherwise the probes' values, read before the full round the caller runs next, are kept:
        a commit during that round moves them, so the next round reads again."""
        probes = self._open()
        if not probes:
            return False
        token = tuple(int(probe.read()) for probe in probes)
        quiet = (
            token == self._seen
            and now - self._full_at < self.heartbeat_s
            and not any(source.reconcile_due() for source in sources)
        )
        if not quiet:
            self._seen, self._full_at = token, now
        return quiet

    def reset(self) -> None:
        """Close the probes (after a failure, or when stopping): the next round reads all."""
        probes, self._probes, self._seen = self._probes or [], None, None
        for probe in probes:
            try:
                probe.close()
            except Exception:  # noqa: S110 - a broken connection closes as best it can
                pass

    def _open(self) -> list[CommitProbe]:
        """One probe per database; an empty list when any of them has none (never skip)."""
        if self._probes is None:
            probes: list[CommitProbe] = []
            for owner in self._owners:
                make = getattr(owner, "change_probe", None)
                probe = make() if make is not None else None
                if probe is None:
                    self._probes = probes
                    self.reset()
                    self._probes = []
                    return []
                probes.append(probe)
            self._probes = probes
        return self._probes
