import argparse

import pytest

from invalidation_contracts.cli import CommandError, main
from invalidation_contracts.cli.options import _trust_options


def test_keygen_writes_a_private_key_and_prints_the_public_key(tmp_path, capsys):
    out = tmp_path / "k2026.pem"
    assert main(["keygen", "--out", str(out)]) == 0
    assert out.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert "key id k2026" in capsys.readouterr().out


def test_keygen_refuses_to_overwrite_a_key(tmp_path, capsys):
    out = tmp_path / "k.pem"
    out.write_text("keep me")
    assert main(["keygen", "--out", str(out)]) == 1
    assert out.read_text() == "keep me" and "refusing" in capsys.readouterr().err


def test_serve_builds_trust_options_from_its_flags(tmp_path, monkeypatch):
    main(["keygen", "--out", str(tmp_path / "old.pem")])
    main(["keygen", "--out", str(tmp_path / "new.pem")])
    monkeypatch.setenv("OPAQUE", "x" * 32)
    args = argparse.Namespace(
        signing_key=[tmp_path / "old.pem", tmp_path / "new.pem"], opaque_key_env="OPAQUE"
    )
    trust = _trust_options(args)
    assert set(trust.signing_keys) == {"old", "new"} and trust.active_kid == "new"
    assert trust.opaque_key == b"x" * 32


def test_a_short_opaque_secret_is_refused(monkeypatch):
    monkeypatch.setenv("OPAQUE", "short")
    with pytest.raises(CommandError, match="at least 16 bytes"):
        _trust_options(argparse.Namespace(signing_key=[], opaque_key_env="OPAQUE"))


def test_a_file_that_is_not_a_key_is_refused(tmp_path):
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key")
    with pytest.raises(CommandError, match="cannot read signing key"):
        _trust_options(argparse.Namespace(signing_key=[bad], opaque_key_env=None))
