"""Private keys private (reliability audit 2, N2): keys are created 0600 with no window, never
through a link, never over an existing file; key and token files others can read are warned
about (docs/threat-model.md T33)."""

from __future__ import annotations

import argparse
import logging
import os
import stat
import threading
from pathlib import Path

import pytest

from invalidation_contracts.cli import main
from invalidation_contracts.cli.options import _admin_token
from invalidation_contracts.private_files import PrivateFileError, exposure, write_private
from invalidation_contracts.server.trust import TrustOptions


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_keygen_creates_the_key_0600_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        assert main(["keygen", "--out", str(tmp_path / "k.pem")]) == 0
    finally:
        os.umask(old)

    assert mode(tmp_path / "k.pem") == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["k.pem"]  # no temporary file left


def test_no_file_is_ever_visible_under_another_mode_while_keys_are_written(tmp_path):
    """The audit's race (t9), bounded: a reader polls the directory while 40 keys are written."""
    seen: set[int] = set()
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            for entry in os.scandir(tmp_path):
                try:
                    seen.add(stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode))
                except FileNotFoundError:
                    pass

    reader = threading.Thread(target=poll)
    old = os.umask(0o022)
    reader.start()
    try:
        for n in range(40):
            assert main(["keygen", "--out", str(tmp_path / f"k{n}.pem")]) == 0
    finally:
        done.set()
        reader.join(timeout=10)
        os.umask(old)

    assert seen == {0o600}


def test_keygen_refuses_a_dangling_symlink_and_creates_nothing_through_it(tmp_path, capsys):
    target = tmp_path / "elsewhere" / "stolen.pem"
    target.parent.mkdir()
    (tmp_path / "k.pem").symlink_to(target)

    assert main(["keygen", "--out", str(tmp_path / "k.pem")]) == 1

    assert not target.exists()
    err = capsys.readouterr().err.strip()
    assert "refusing" in err and len(err.splitlines()) == 1


def test_write_private_never_replaces_a_link_to_an_existing_file(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (tmp_path / "k.pem").symlink_to(victim)

    with pytest.raises(PrivateFileError, match="refusing"):
        write_private(tmp_path / "k.pem", b"secret")
    assert victim.read_text() == "keep me"


def test_a_token_file_others_can_read_is_warned_about(tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text("s3cret-token")
    token.chmod(0o644)

    assert _admin_token(argparse.Namespace(admin_token_file=token)) == "s3cret-token"
    err = capsys.readouterr().err
    assert "warning" in err and "0644" in err and "chmod 600" in err


def test_a_private_token_file_is_read_without_a_warning(tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text("s3cret-token")
    token.chmod(0o600)

    assert _admin_token(argparse.Namespace(admin_token_file=token)) == "s3cret-token"
    assert capsys.readouterr().err == "" and exposure(token) is None


def test_a_signing_key_others_can_read_is_warned_about(tmp_path, caplog):
    main(["keygen", "--out", str(tmp_path / "k.pem")])
    (tmp_path / "k.pem").chmod(0o640)

    with caplog.at_level(logging.WARNING, logger="invalidation_contracts.server"):
        trust = TrustOptions.from_files((str(tmp_path / "k.pem"),), None)

    assert trust is not None and set(trust.signing_keys) == {"k"}
    assert any("0640" in r.getMessage() for r in caplog.records)
