"""A bounded, sans-IO Server-Sent Events parser for the watch stream (SPEC §8.4).

Everything in a watch stream is controlled by the server, so every read is bounded: a line longer
than ``max_line_bytes``, or more than ``max_event_bytes`` received without a complete event or a
heartbeat (garbage, or an event that never ends), raises ``StreamViolation``; so does a line that
is not UTF-8. The watcher then drops the stream and the memory keeps working on what responses
say (response-time detection).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Bytes one line of a watch stream may have.
MAX_LINE_BYTES = 4096
#: Bytes a stream may send without completing an event or a heartbeat.
MAX_EVENT_BYTES = 16_384


class StreamViolation(ValueError):
    """The stream broke a bound or the event-stream format; ``str`` says how."""


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event (``event`` defaults to ``message``, as in the SSE standard)."""

    event: str
    data: str
    id: str | None = None


class SSEParser:
    """Feed it bytes as they arrive; it returns the events they completed.

    ``progress`` counts completed events and comments (heartbeats): a watcher uses it to tell a
    live stream from a stalled or garbage one.
    """

    def __init__(
        self, *, max_line_bytes: int = MAX_LINE_BYTES, max_event_bytes: int = MAX_EVENT_BYTES
    ) -> None:
        self.max_line_bytes = max_line_bytes
        self.max_event_bytes = max_event_bytes
        self.progress = 0
        self._buffer = bytearray()
        self._pending = 0  # bytes since the last event or comment
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self._cr = False  # the last chunk ended in CR: a LF right after belongs to it

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events ``chunk`` completed; ``StreamViolation`` when a bound is broken."""
        events: list[SSEEvent] = []
        if self._cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._cr = False
        self._buffer += chunk
        self._pending += len(chunk)
        while True:
            end = _line_end(self._buffer)
            if end is None:
                break
            cut, skip = end
            raw = bytes(self._buffer[:cut])
            if skip == 1 and self._buffer[cut : cut + 1] == b"\r" and cut + 1 == len(self._buffer):
                self._cr = True
            del self._buffer[: cut + skip]
            if len(raw) > self.max_line_bytes:
                raise StreamViolation(f"a line of {len(raw)} bytes (at most {self.max_line_bytes})")
            event = self._line(raw)
            if event is not None:
                events.append(event)
        if len(self._buffer) > self.max_line_bytes:
            raise StreamViolation(f"a line longer than {self.max_line_bytes} bytes")
        if self._pending > self.max_event_bytes:
            raise StreamViolation(
                f"{self._pending} bytes without a complete event (at most {self.max_event_bytes})"
            )
        return events

    def _line(self, raw: bytes) -> SSEEvent | None:
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise StreamViolation("a line that is not UTF-8") from None
        if not line:
            return self._dispatch()
        if line.startswith(":"):  # a comment: the heartbeat
            self.progress += 1
            self._pending = 0
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        return None  # ``retry`` and unknown fields are ignored, as the standard says

    def _dispatch(self) -> SSEEvent | None:
        event, data, ident = self._event, self._data, self._id
        self._event, self._data = "", []
        if not data:
            return None
        self.progress += 1
        self._pending = 0
        return SSEEvent(event or "message", "\n".join(data), ident)


def _line_end(buffer: bytearray) -> tuple[int, int] | None:
    """Where the first line ends (its length, and 1 or 2 terminator bytes), if it does."""
    lf = buffer.find(b"\n")
    cr = buffer.find(b"\r")
    if cr == -1 and lf == -1:
        return None
    if cr == -1 or (lf != -1 and lf < cr):
        return lf, 1
    if cr + 1 < len(buffer) and buffer[cr + 1 : cr + 2] == b"\n":
        return cr, 2
    return cr, 1
