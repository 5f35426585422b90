"""What a valid contract position is (SPEC §3.1): one rule for the server and the client.

``contract_epoch`` is 1–128 visible ASCII characters (``!`` to ``~``: it travels back as the
``Contract-Epoch`` header, so no space, control character or non-ASCII letter); ``contract_seq``
is a JSON integer (not a boolean, a string or a float) from 0 to 2^53−1, the I-JSON range
(RFC 7493). The server refuses a header outside these rules; the client refuses a response
carrying one and drops a stored position that breaks them, so no response can poison it.
"""

from __future__ import annotations

import re

MAX_SAFE_INTEGER = 2**53 - 1
MAX_EPOCH_LENGTH = 128
EPOCH_PATTERN = r"^[\x21-\x7e]{1,128}$"
SEQ_DIGITS = len(str(MAX_SAFE_INTEGER))
_EPOCH = re.compile(EPOCH_PATTERN)
_DIGITS = re.compile(rf"[0-9]{{1,{SEQ_DIGITS}}}")


def valid_epoch(value: object) -> bool:
    """Whether ``value`` may be a ``contract_epoch``."""
    return isinstance(value, str) and _EPOCH.fullmatch(value) is not None


def valid_seq(value: object) -> bool:
    """Whether ``value`` may be a ``contract_seq`` (a position): an int in the I-JSON range."""
    return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER


def parse_seq(text: str) -> int | None:
    """A ``Contract-Since`` header's seq: ASCII digits only (no sign, point or space) in range."""
    if _DIGITS.fullmatch(text) is None:
        return None
    seq = int(text)
    return seq if seq <= MAX_SAFE_INTEGER else None
