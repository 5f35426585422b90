"""One scrape target for ``serve --workers N``: every worker's metrics, merged, from any worker.

A scrape reaches one worker (Prometheus keeps its connection alive), and each worker counts only
what it served. So each worker publishes its own exposition into a folder the workers share
(``$INVALIDATION_CONTRACTS_METRICS_DIR``, made by ``serve``): at start, every ``refresh_s`` (1 s)
from a daemon thread, and at each scrape it answers. The scraped worker merges every file: each
sample gains a ``worker`` label (the publishing worker's pid) unless it has one, so every series
is one process's, ``sum without (worker)`` is the provider's total, and a worker restarted by
the supervisor is a new series (its predecessor's file stays, so no count is lost; its gauges
are left out once its process is gone: a dead worker serves no seq and is not "not ready"). What
the other workers did reaches a scrape within ``refresh_s``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from .._extras import missing

try:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.metrics_core import Metric
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.samples import Sample
except ModuleNotFoundError as exc:
    raise missing(exc, "otel") from exc

METRICS_DIR_ENV = "INVALIDATION_CONTRACTS_METRICS_DIR"
"""The folder ``serve --workers N --metrics`` gives its workers to share their metrics in."""
REFRESH_S = 1.0
SUFFIX = ".prom"


def merge(texts: Mapping[str, str], gone: frozenset[str] = frozenset()) -> bytes:
    """The expositions ``texts`` (by worker) as one, each sample labelled with its worker;
    the gauges of the workers in ``gone`` (no longer running) are left out. A series that
    several workers report alike (labelled with a ``worker`` of its own, such as the client
    scores every worker reads from the registry, ``observe.shared``) is kept once: the first
    text's (give the freshest first)."""
    families: dict[str, Metric] = {}
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for worker, text in texts.items():
        try:
            parsed = list(text_string_to_metric_families(text))
        except ValueError:  # a file torn by a crash: that worker is left out of this scrape
            continue
        for family in parsed:
            if worker in gone and family.type == "gauge":
                continue
            merged = families.get(family.name)
            if merged is None:
                merged = Metric(family.name, family.documentation, family.type, family.unit)
                families[family.name] = merged
            for sample in family.samples:
                labels = {**sample.labels}
                labels.setdefault("worker", worker)
                series = (sample.name, tuple(sorted(labels.items())))
                if series in seen:
                    continue
                seen.add(series)
                merged.samples.append(
                    Sample(sample.name, labels, sample.value, sample.timestamp, sample.exemplar)
                )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(list(families.values())))
    return generate_latest(registry)


def _running(worker: str) -> bool:
    """Whether the process named ``worker`` (a pid) still runs (a name that is not one: yes)."""
    try:
        os.kill(int(worker), 0)
    except ProcessLookupError:
        return False
    except (ValueError, OverflowError, PermissionError):
        return True
    return True


class _Families:
    """A collector that yields fixed families (what ``generate_latest`` renders)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class WorkerFiles:
    """This worker's exposition published in ``directory``, and every worker's merged."""

    def __init__(
        self,
        directory: Path,
        own: Callable[[], bytes],
        *,
        worker: str | None = None,
        refresh_s: float = REFRESH_S,
    ) -> None:
        self.directory = directory
        self.worker = worker if worker is not None else str(os.getpid())
        self._own = own
        self._path = directory / f"{self.worker}{SUFFIX}"
        self._stop = threading.Event()
        self._refresh_s = refresh_s
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Publish now and every ``refresh_s`` until ``stop``."""
        self.publish()
        self._thread = threading.Thread(
            target=self._run, name="invalidation-contracts-metrics", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def publish(self) -> bytes:
        """Write this worker's exposition (atomically: a reader sees a whole file); it."""
        text = self._own()
        temporary = self._path.with_name(f".{self._path.name}.tmp")
        with contextlib.suppress(OSError):  # a folder gone at shutdown: nothing to publish to
            temporary.write_bytes(text)
            os.replace(temporary, self._path)
        return text

    def render(self) -> bytes:
        """Every worker's exposition merged (this one's fresh, the others' within refresh_s)."""
        own = self.publish().decode("utf-8")
        texts = {self.worker: own}  # first: its shared series are the freshest
        with contextlib.suppress(OSError):
            for path in sorted(self.directory.glob(f"*{SUFFIX}")):
                worker = path.name[: -len(SUFFIX)]
                if worker != self.worker:
                    with contextlib.suppress(OSError, UnicodeDecodeError):
                        texts[worker] = path.read_text(encoding="utf-8")
        return merge(texts, frozenset(w for w in texts if w != self.worker and not _running(w)))

    def _run(self) -> None:
        while not self._stop.wait(self._refresh_s):
            try:
                self.publish()
            except Exception:  # noqa: BLE001 - metrics never take a worker down
                continue
