"""A libc stand-in for ``store.inotify._libc`` whose inotify cannot be set up."""

from __future__ import annotations

import ctypes
import errno


class FailingLibc:
    """libc whose ``inotify_init1`` fails, as when ``fs.inotify.max_user_instances`` is reached."""

    @staticmethod
    def inotify_init1(flags: int) -> int:
        ctypes.set_errno(errno.EMFILE)
        return -1
