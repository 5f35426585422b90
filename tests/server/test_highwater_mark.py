"""The SQLite registry's high-water mark as a value (``server/store/highwater.py``, issue 21):
which stored positions continue it, and what a mark file on disk says."""

from __future__ import annotations

import json
from pathlib import Path

from invalidation_contracts.server.store.highwater import (
    Mark,
    covers,
    discontinuity,
    read_mark,
    write_mark,
)

ANNOUNCING = Mark("old", 7, pending=Mark("new", 8))


def test_a_file_at_or_ahead_of_its_mark_continues_it() -> None:
    assert discontinuity(Mark("e", 7), "e", 7) is None
    assert discontinuity(Mark("e", 7), "e", 9) is None  # a commit whose raise was cut short


def test_a_file_behind_its_mark_or_of_another_epoch_does_not() -> None:
    assert "restored from a backup" in str(discontinuity(Mark("e", 7), "e", 6))
    assert "restored or replaced" in str(discontinuity(Mark("e", 7), "f", 9))


def test_an_announced_epoch_change_continues_from_either_side_of_its_commit() -> None:
    assert discontinuity(ANNOUNCING, "old", 7) is None  # killed before the COMMIT
    assert discontinuity(ANNOUNCING, "new", 8) is None  # killed after it
    assert discontinuity(ANNOUNCING, "old", 6) is not None  # a restore is still one
    assert discontinuity(ANNOUNCING, "other", 8) is not None


def test_a_mark_vouches_only_for_positions_it_reached_in_its_epoch() -> None:
    assert covers(Mark("e", 7), "e", 7) and covers(Mark("e", 7), "e", 3)
    assert not covers(Mark("e", 7), "e", 8)
    assert not covers(ANNOUNCING, "new", 8)  # announced is not served: raised after the COMMIT
    assert not covers(None, "e", 0)


def test_a_mark_round_trips_through_its_file_with_or_without_an_announcement(
    tmp_path: Path,
) -> None:
    path = tmp_path / "registry.db-history"
    for mark in (Mark("e", 3), ANNOUNCING):
        write_mark(path, mark)
        assert read_mark(path) == mark
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


def test_a_mark_written_before_announcements_existed_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "registry.db-history"
    path.write_text(json.dumps({"epoch": "e", "seq": 4}), encoding="ascii")
    assert read_mark(path) == Mark("e", 4)


def test_an_unreadable_mark_or_announcement_says_nothing(tmp_path: Path) -> None:
    path = tmp_path / "registry.db-history"
    for text in ("", "[]", '{"epoch": "e"}', '{"epoch": "e", "seq": 1, "pending": {"seq": 2}}'):
        path.write_text(text, encoding="ascii")
        assert read_mark(path) is None, text
