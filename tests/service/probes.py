"""Probes for the fault-injection tests: a client that keeps asking every worker for its stamps,
and a bounded wait until every worker of a server says it is ready (docs/SPEC.md §8.2.5)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from invalidation_contracts.protocol.problems import PROBLEM_BASE
from invalidation_contracts.server.worker.timing import DEFAULT_MAX_LAG_S

UNAVAILABLE = PROBLEM_BASE + "registry-unavailable"
RECOVERY_BOUND_S = 60.0


@dataclass
class Seen:
    sent: float
    status: int
    seq: int | None
    detail: str | None = None  # a 503's problem detail: why the worker could not vouch


@dataclass
class Probe:
    """Sends ``GET /contract/versions`` on fresh connections (so every worker answers) in a
    background thread and records when each request was sent and what it carried. A request the
    transport lost (a worker killed under it) counts in ``dropped``; an answer that breaks the
    contract (a 503 with stamps, a status other than 200/503) fails the test at ``__exit__``."""

    url: str
    seen: list[Seen] = field(default_factory=list)
    dropped: int = 0
    failure: AssertionError | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Probe:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(30)
        if self.failure is not None and exc[0] is None:
            raise self.failure

    def _run(self) -> None:
        limits = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(limits=limits, timeout=10.0) as http:
            while not self._stop.is_set():
                sent = time.monotonic()
                try:
                    answer = http.get(self.url + "/contract/versions")
                except httpx.TransportError:
                    self.dropped += 1
                    self._stop.wait(0.02)
                    continue
                try:
                    seq = _stamped_seq(answer)
                    detail = answer.json().get("detail") if seq is None else None
                    self.seen.append(Seen(sent, answer.status_code, seq, detail))
                except AssertionError as failure:
                    self.failure = failure
                    return
                self._stop.wait(0.02)

    def unverified(self, committed_at: float, seq: int) -> list[Seen]:
        """Stamped answers older than ``seq`` to requests sent past the lag bound."""
        bound = committed_at + DEFAULT_MAX_LAG_S
        return [s for s in self.seen if s.sent > bound and s.seq is not None and s.seq < seq]

    def unavailable(self) -> list[Seen]:
        """The answers that were 503, in the order they were sent."""
        return [s for s in self.seen if s.status == 503]

    def stamped_between(self, start: float, end: float) -> list[Seen]:
        return [s for s in self.seen if start < s.sent < end and s.status != 503]


def _stamped_seq(answer: httpx.Response) -> int | None:
    if answer.status_code == 503:
        body = answer.json()
        assert body["type"] == UNAVAILABLE, body
        assert "contract_seq" not in body and "table_versions" not in body, body
        assert answer.headers["retry-after"]
        return None
    assert answer.status_code == 200, answer.text
    return int(answer.json()["contract_seq"])


def wait_every_worker_ready(url: str, workers: int, seq: int) -> set[int]:
    """Poll ``/contract/ready`` on fresh connections until ``workers`` distinct processes say
    ready at ``seq`` or later (bounded); the set of their pids."""
    return set(ready_reports(url, workers, seq))


def ready_reports(url: str, workers: int, seq: int) -> dict[int, dict[str, Any]]:
    """Poll ``/contract/ready`` on fresh connections until ``workers`` distinct processes say
    ready at ``seq`` or later (bounded); each one's report, by pid."""
    reports: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + RECOVERY_BOUND_S
    limits = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(limits=limits, timeout=10.0) as http:
        while len(reports) < workers:
            assert time.monotonic() < deadline, f"only workers {sorted(reports)} became ready"
            try:
                answer = http.get(url + "/contract/ready")
            except httpx.TransportError:
                continue
            body = answer.json()
            if answer.status_code == 200 and body["contract_seq"] >= seq:
                assert body["ready"] and body["live"] and body["lag_s"] < body["max_lag_s"]
                reports[body["pid"]] = body
            time.sleep(0.02)
    return reports
