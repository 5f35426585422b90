"""The xdist schedule's list of long files (tests/support/schedule.py) names files that exist."""

from __future__ import annotations

from pathlib import Path

from tests.support.schedule import LONG_FILES, rank

ROOT = Path(__file__).resolve().parents[1]


def test_every_long_file_of_the_schedule_exists() -> None:
    for path in LONG_FILES:
        assert (ROOT / path).is_file(), f"{path}: renamed? update LONG_FILES"


def test_long_files_go_first_in_their_order_and_the_rest_after_them() -> None:
    assert [rank(path) for path in LONG_FILES] == list(range(len(LONG_FILES)))
    assert rank("tests/test_schedule.py") == len(LONG_FILES)
