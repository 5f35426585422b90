"""Private files (signing keys, admin tokens): created 0600 with no window, read with a warning
when others may read them.

``write_private`` never exposes the secret under another mode, even for an instant (reliability
audit 2, N2: the key was written 0644, then chmod'ed, and another user read it in 65 of 80
trials): it writes a temporary file created ``O_CREAT | O_EXCL | O_NOFOLLOW`` with mode 0600,
then links it to its name, which fails if anything — a file, or a symlink, dangling or not — is
already there. ``exposure`` says whether a file's mode lets other users read or write it.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path


class PrivateFileError(OSError):
    """The private file could not be written where asked."""


def write_private(path: Path, data: bytes) -> None:
    """Create ``path`` holding ``data``, mode 0600 from its first byte; never replace anything."""
    if os.path.lexists(path):
        raise PrivateFileError(f"{path} exists (or is a link); refusing to overwrite it")
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(temporary, flags, 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)  # whatever the umask left
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temporary, path, follow_symlinks=False)
        except FileExistsError:
            raise PrivateFileError(
                f"{path} appeared while writing (or is a link); refusing to overwrite it"
            ) from None
    finally:
        os.unlink(temporary)


def exposure(path: Path) -> str | None:
    """Why ``path`` is not private (group or others may read or write it), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # the read that follows reports it
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return (
            f"{path} can be read or written by other users (mode {stat.S_IMODE(mode):04o}); "
            f"run chmod 600 {path}"
        )
    return None
