"""JSON log lines (``serve --log-format json``): one object a line, with the request's trace ids.

``JsonFormatter`` writes ``time`` (RFC 3339, UTC), ``level``, ``logger`` and ``message`` (and
``exception``; an access line adds ``client``, ``method``, ``path`` and ``status``), plus
``trace_id`` and ``span_id`` while a request that carried a W3C ``traceparent`` is handled: the
current OpenTelemetry span's when one is valid (the server's own span, or the caller's context
that ``observe.tracing`` attached), else the caller's as ``RequestTrace`` read them, so the ids
are there without the ``otel`` extra too. ``log_config`` is the ``logging.config`` dictionary
uvicorn applies in each worker process. Standard library only.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

LOG_FORMATS = ("text", "json")

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")
_CALLER: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "invalidation_contracts_caller_trace", default=None
)


def parse_traceparent(value: str) -> tuple[str, str] | None:
    """The (trace id, parent span id) of a W3C ``traceparent`` value; None if malformed (version
    ff, or an all-zero id, as the W3C says)."""
    found = _TRACEPARENT.match(value.strip().lower())
    if found is None or value.strip()[:2].lower() == "ff":
        return None
    trace_id, span_id = found.groups()
    if set(trace_id) == {"0"} or set(span_id) == {"0"}:
        return None
    return trace_id, span_id


class RequestTrace:
    """Pure ASGI middleware: the caller's trace ids of a request that carries ``traceparent``,
    for the log lines written while it is handled (a malformed header is ignored)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ids = None
        if scope.get("type") == "http":
            for name, value in scope.get("headers") or ():
                if name == b"traceparent":
                    ids = parse_traceparent(value.decode("latin-1"))
                    break
        if ids is None:
            await self.app(scope, receive, send)
            return
        token = _CALLER.set(ids)
        try:
            await self.app(scope, receive, send)
        finally:
            _CALLER.reset(token)


def current_trace() -> tuple[str, str] | None:
    """The (trace id, span id) the running code works for: OpenTelemetry's current span when it
    is valid (only looked up when OpenTelemetry is loaded), else the request's caller."""
    otel = sys.modules.get("opentelemetry.trace")
    if otel is not None:
        context = otel.get_current_span().get_span_context()
        if context.is_valid:
            return format(context.trace_id, "032x"), format(context.span_id, "016x")
    return _CALLER.get()


class JsonFormatter(logging.Formatter):
    """A log record as one JSON object on one line (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.name == "uvicorn.access" and isinstance(record.args, tuple):
            if len(record.args) == 5:
                client, method, path, _, status = record.args
                line.update(client=client, method=method, path=path, status=status)
        trace = current_trace()
        if trace is not None:
            line["trace_id"], line["span_id"] = trace
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def log_config(level: str = "info") -> dict[str, Any]:
    """The ``logging.config`` dictionary of JSON lines on stderr: uvicorn's loggers at ``level``,
    everything else at warning (as the plain format)."""
    handler = {"handlers": ["stderr"], "level": level.upper(), "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {"uvicorn": handler, "uvicorn.access": handler},
        "root": {"handlers": ["stderr"], "level": "WARNING"},
    }
