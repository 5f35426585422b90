"""Bounded reading of a body a server controls: decoded bytes counted as they stream, depth bounded.

A cap checked against the bytes on the wire does not hold once they are decoded: a 0.87 MB
gzip body can decode to 900 MiB (reliability audit 2, N1). ``BoundedBody`` decodes the body's
``Content-Encoding`` chain itself — the encodings httpx decodes, in httpx's order, and nothing
else — in steps of at most ``STEP`` decoded bytes (``zlib`` with ``max_length`` for gzip and
deflate; br and zstd through httpx's own decoder, fed ``SLICE`` encoded bytes at a time), counts
the decoded bytes against the cap and stops at the first bound broken: the decoded size, the
decoding ratio, or the encoded size. Nothing past a bound is ever decoded or kept.

Nesting is bounded before parsing, by the core's ``client.limits.parse_json``.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from ..client.limits import Limits, Refusal

#: Most decoded bytes one decoding step produces (then the bounds are checked again).
STEP = 64 * 1024
#: Encoded bytes fed at a time to a decoder that cannot bound its output (br, zstd).
SLICE = 64
#: Decoded bytes always allowed before the ratio bound applies (a short body compresses well).
RATIO_FLOOR = 64 * 1024


class _Stage(Protocol):
    def pieces(self, data: bytes) -> Iterator[bytes]: ...

    def flush(self) -> Iterator[bytes]: ...


class _Zlib:
    """gzip or deflate, each call producing at most ``STEP`` bytes (``max_length``)."""

    def __init__(self, wbits: int, fallback: int | None = None) -> None:
        self._obj = zlib.decompressobj(wbits)
        self._fallback = fallback  # deflate: raw deflate when the zlib header does not parse
        self._head = b""  # the bytes a fallback decodes again (until the header is known)

    def pieces(self, data: bytes) -> Iterator[bytes]:
        if self._fallback is not None:
            self._head += data
        while data and not self._obj.eof:
            try:
                out = self._obj.decompress(data, STEP)
            except zlib.error:
                if self._fallback is None:
                    raise
                self._obj = zlib.decompressobj(self._fallback)
                self._fallback, data = None, self._head
                continue
            if len(self._head) >= 2:  # the zlib header parsed: no fallback from here
                self._fallback = None
            data = self._obj.unconsumed_tail
            if out:
                yield out

    def flush(self) -> Iterator[bytes]:
        yield from self.pieces(self._obj.unconsumed_tail)
        out = self._obj.flush()
        if out:
            yield out


class _Sliced:
    """A decoder of httpx's that bounds no output (br, zstd), fed ``SLICE`` bytes at a time."""

    def __init__(self, decoder: Any) -> None:
        self._decoder = decoder

    def pieces(self, data: bytes) -> Iterator[bytes]:
        for start in range(0, len(data), SLICE):
            out: bytes = self._decoder.decode(data[start : start + SLICE])
            if out:
                yield out

    def flush(self) -> Iterator[bytes]:
        out: bytes = self._decoder.flush()
        if out:
            yield out


def _stage(encoding: str) -> _Stage | None:
    """The decoder of one content-coding, or None where httpx leaves it undecoded."""
    if encoding == "gzip":
        return _Zlib(zlib.MAX_WBITS | 16)
    if encoding == "deflate":
        return _Zlib(zlib.MAX_WBITS, fallback=-zlib.MAX_WBITS)
    from httpx import _decoders  # br and zstd exactly when httpx can decode them

    decoder = _decoders.SUPPORTED_DECODERS.get(encoding)
    if decoder is None or encoding == "identity":
        return None
    return _Sliced(decoder())


def stages_of(headers: httpx.Headers) -> list[_Stage]:
    """The decoders of a response's ``Content-Encoding``, in httpx's order."""
    found = (_stage(v.strip().lower()) for v in headers.get_list("content-encoding", True))
    return [stage for stage in found if stage is not None]


def _pump(stages: Sequence[_Stage], data: bytes) -> Iterator[bytes]:
    """Decode ``data`` through the chain, lazily: each stage's output is bounded in turn."""
    if not stages:
        if data:
            yield data
        return
    for piece in stages[0].pieces(data):
        yield from _pump(stages[1:], piece)


def _drain(stages: Sequence[_Stage]) -> Iterator[bytes]:
    for index, stage in enumerate(stages):
        for piece in stage.flush():
            yield from _pump(stages[index + 1 :], piece)


@dataclass(slots=True)
class BoundedBody:
    """One body read incrementally for the memory, holding each byte once, at most ``cap`` (plus
    one chunk or step) of it: an unencoded body's chunks are its decoded bytes; an encoded one
    keeps its decoded bytes, and its raw chunks only when they are replayed to the agent."""

    stages: list[_Stage]
    cap: int
    ratio: int
    bound: str = "max_body_bytes"
    replay: bool = True
    """Keep the raw chunks to replay to the agent (a need's fetch, read by the memory alone,
    keeps none of an encoded body's)."""
    raw: list[bytes] = field(default_factory=list)
    raw_bytes: int = 0
    decoded: bytearray = field(default_factory=bytearray)
    decoded_bytes: int = 0
    refusal: Refusal | None = None
    broken: bool = False
    """The encoding did not decode (httpx would raise ``DecodingError`` on it)."""
    ended: bool = False

    @classmethod
    def of(
        cls, headers: httpx.Headers, cap: int, limits: Limits, bound: str, *, replay: bool = True
    ) -> BoundedBody:
        return cls(stages_of(headers), cap, limits.max_decoding_ratio, bound, replay)

    @property
    def stopped(self) -> bool:
        return self.refusal is not None or self.broken

    def feed(self, chunk: bytes) -> bool:
        """Take one raw chunk; False once a bound is broken (read no further)."""
        self.raw_bytes += len(chunk)
        if self.replay or not self.stages:
            self.raw.append(chunk)
        if self.raw_bytes > self.cap:
            self.refusal = Refusal(self.bound, self.raw_bytes)
            return False
        if not self.stages:  # the chunks are the decoded bytes: nothing to decode or copy
            self.decoded_bytes = self.raw_bytes
            return True
        return self._take(_pump(self.stages, chunk))

    def finish(self) -> bytes | None:
        """The decoded body, once the stream ended; None if a bound broke or it did not decode."""
        if not self.ended and not self.stopped and self.stages:
            self._take(_drain(self.stages))
        self.ended = True
        if self.stopped:
            return None
        return bytes(self.decoded) if self.stages else b"".join(self.raw)

    def over_size(self) -> bool:
        """Whether the bound broken is the byte cap (which the size alone reports)."""
        return self.refusal is not None and self.refusal.bound == self.bound

    @property
    def size(self) -> int:
        """The body's decoded size (at least, when a size bound broke)."""
        if self.refusal is not None and self.over_size():
            return self.refusal.actual
        return self.decoded_bytes

    def _take(self, pieces: Iterator[bytes]) -> bool:
        try:
            for piece in pieces:
                self.decoded += piece
                self.decoded_bytes = len(self.decoded)
                if len(self.decoded) > self.cap:
                    self.refusal = Refusal(self.bound, len(self.decoded))
                    return False
                if (
                    len(self.decoded) > RATIO_FLOOR
                    and len(self.decoded) > self.ratio * self.raw_bytes
                ):
                    self.refusal = Refusal(
                        "max_decoding_ratio", len(self.decoded) // max(self.raw_bytes, 1)
                    )
                    return False
        except (zlib.error, httpx.DecodingError):
            self.broken = True
            return False
        return True


def settle(response: httpx.Response, body: BoundedBody) -> None:
    """The whole body was read: release the connection and replay the bytes to the agent."""
    original = response.stream
    response.stream = httpx.ByteStream(b"".join(body.raw))
    if isinstance(original, httpx.SyncByteStream):
        original.close()


async def asettle(response: httpx.Response, body: BoundedBody) -> None:
    original = response.stream
    response.stream = httpx.ByteStream(b"".join(body.raw))
    if isinstance(original, httpx.AsyncByteStream):
        await original.aclose()


class Replay(httpx.SyncByteStream):
    """The chunks read already, then the rest of the original stream (closed with it)."""

    def __init__(self, head: list[bytes], rest: Iterator[bytes], original: Any) -> None:
        self.head, self.rest, self.original = head, rest, original

    def __iter__(self) -> Iterator[bytes]:
        yield from self.head
        yield from self.rest

    def close(self) -> None:
        self.original.close()


class AsyncReplay(httpx.AsyncByteStream):
    def __init__(self, head: list[bytes], rest: AsyncIterator[bytes], original: Any) -> None:
        self.head, self.rest, self.original = head, rest, original

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.head:
            yield chunk
        async for chunk in self.rest:
            yield chunk

    async def aclose(self) -> None:
        await self.original.aclose()
