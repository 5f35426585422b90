"""A real OTLP/HTTP receiver on 127.0.0.1 for the tests: decodes the protobuf export requests.

Debian packages no OpenTelemetry collector, so this is the receiving end the exporters talk to:
``POST /v1/metrics`` and ``POST /v1/traces`` with ``application/x-protobuf`` bodies (gzip or not),
decoded by ``opentelemetry-proto`` into ``ExportMetricsServiceRequest`` /
``ExportTraceServiceRequest`` and kept; each is answered 200 with its empty response message, as
a collector answers. Anything else is answered 404 or 400 (a garbage body) and kept out.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

_KINDS: dict[str, tuple[Any, Any]] = {
    "/v1/metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse),
    "/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse),
}


@dataclass
class Received:
    """What the receiver decoded, by path, in arrival order (guarded by ``lock``)."""

    requests: dict[str, list[Any]] = field(default_factory=lambda: {p: [] for p in _KINDS})
    lock: threading.Lock = field(default_factory=threading.Lock)

    def metric_names(self) -> set[str]:
        with self.lock:
            found = list(self.requests["/v1/metrics"])
        return {
            metric.name
            for request in found
            for resource in request.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }

    def metric_resources(self, attribute: str) -> set[str]:
        """The string values of resource ``attribute`` across every metrics export."""
        with self.lock:
            found = list(self.requests["/v1/metrics"])
        return {
            kept.value.string_value
            for request in found
            for resource in request.resource_metrics
            for kept in resource.resource.attributes
            if kept.key == attribute
        }

    def spans(self) -> list[Any]:
        with self.lock:
            found = list(self.requests["/v1/traces"])
        return [
            span
            for request in found
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]


def _handler(received: Received) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the http.server name)
            kinds = _KINDS.get(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if kinds is None:
                self._answer(404, b"")
                return
            request_type, response_type = kinds
            try:
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                message = request_type.FromString(body)
            except (DecodeError, OSError):
                self._answer(400, b"")
                return
            with received.lock:
                received.requests[self.path].append(message)
            self._answer(200, response_type().SerializeToString())

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # quiet: the tests read what was received

    return Handler


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, Received]]:
    """Run a receiver on a free 127.0.0.1 port for the block; yields its base URL and what it
    received."""
    received = Received()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(received))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
