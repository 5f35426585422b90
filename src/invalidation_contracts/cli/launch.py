"""What ``invalidation-contracts serve`` builds, as a value that travels to worker processes.

With ``--workers N`` each uvicorn worker is a fresh process that builds its own app: the command
puts an ``AppSpec`` (JSON) in an environment variable and names ``app_from_env`` as the app
factory. Secrets never travel in it: the admin and metrics tokens and the opaque-names secret are
read from the environment variables the spec names, in each worker.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..server.auth import ADMIN_TOKEN_ENV, METRICS_TOKEN_ENV
from ..server.config import WorkerConfig
from ..server.trust import TrustOptions
from ..server.worker.timing import DEFAULT_MAX_LAG_S, DEFAULT_POLL_INTERVAL_S

if TYPE_CHECKING:
    from fastapi import FastAPI

SPEC_ENV = "INVALIDATION_CONTRACTS_SERVE_SPEC"
FACTORY = "invalidation_contracts.cli.launch:app_from_env"


@dataclass(frozen=True, slots=True)
class AppSpec:
    """The served app: domain, level, where its registry and tables live, auth and trust."""

    domain: str
    level: int = 6
    store: str | None = None
    database: str | None = None
    capture: str = "triggers"
    """How the database's writes are captured: ``triggers`` (``SQLSource``, the default) or
    ``logical`` (``LogicalSource``: PostgreSQL logical decoding, ``wal_level = logical``)."""
    declarations: str | None = None
    admin_token_env: str = ADMIN_TOKEN_ENV
    metrics_token_env: str = METRICS_TOKEN_ENV
    protect_graph: bool = False
    signing_keys: tuple[str, ...] = field(default_factory=tuple)
    opaque_key_env: str | None = None
    max_lag_s: float | None = None
    poll_interval_s: float | None = None
    stall_timeout_s: float | None = None
    reconcile_interval_s: float | None = None
    """How often the tables are compared with the registry (None: ``SQLSource``'s default)."""
    metrics: bool = False
    """Instrument the contract and serve its metrics route (``observe.instrument``)."""
    otlp: str | None = None
    """Instrument the contract and push its metrics and spans to this OTLP/HTTP base URL."""
    log_format: str = "text"
    """``json``: the request's trace ids reach the log lines (``json_logs``)."""
    shared_scores: bool = True
    """With ``metrics`` at several workers: fold client scores through the registry's database
    (``observe.shared``), not in each worker."""
    allowed_hosts: tuple[str, ...] | None = None
    """The ``Host`` names answered (``hosts.HostCheck``); None: no check."""
    max_watch_streams: int | None = None
    """Watch streams one worker holds at once (None: ``MAX_WATCH_STREAMS``)."""
    max_watch_per_client: int | None = None
    """Watch streams one client address holds in one worker (None: the default)."""

    def build(self) -> FastAPI:
        """The app (``create_app``); ``KeyError`` for an unknown domain, ``ValueError`` for bad
        declarations or trust options, ``StorageError`` / ``DeclarationError`` from the stores."""
        from ..domains import get_domain
        from ..server.http.app import create_app

        domain = get_domain(self.domain)
        if self.database is not None:
            from ..server.sql import read_declarations, sql_domain

            declared = read_declarations(self.declarations) if self.declarations else None
            domain = sql_domain(domain, declared)
        config = self.config()
        if self.database is not None and self.capture == "logical":
            from ..server.sql.logical import LogicalSource

            config = config.replace(database=LogicalSource(self.database, domain.sql_tables))
        elif self.database is not None and self.reconcile_interval_s is not None:
            from ..server.sql import SQLSource

            interval = self.reconcile_interval_s
            source = SQLSource(self.database, domain.sql_tables, reconcile_interval_s=interval)
            config = config.replace(database=source)
        app = create_app(domain, config, allowed_hosts=self.allowed_hosts)
        if self.max_watch_streams is not None:
            app.state.service.watch_max_streams = self.max_watch_streams
        if self.max_watch_per_client is not None:
            app.state.service.watch_max_per_client = self.max_watch_per_client
        if self.metrics or self.otlp:
            self._instrument(app, domain.name)
        if self.log_format == "json":
            from ..json_logs import RequestTrace

            app.add_middleware(RequestTrace)
        return app

    def _instrument(self, app: FastAPI, name: str) -> None:
        """``observe.instrument``: a Prometheus route (``metrics``), an OTLP push (``otlp``)."""
        from ..observe import instrument
        from ..observe.clients import ClientKey
        from ..observe.workers import METRICS_DIR_ENV

        otlp = None
        if self.otlp is not None:
            from ..observe.otlp import OtlpPipeline

            otlp = OtlpPipeline(self.otlp, name)
        shared = os.environ.get(METRICS_DIR_ENV)
        exposition = None
        if self.metrics:
            from ..observe.prometheus import PrometheusExposition

            exposition = PrometheusExposition(
                name,
                shared_dir=Path(shared) if shared else None,
                readers=() if otlp is None else (otlp.metric_reader,),
                resource=None if otlp is None else otlp.resource,
            )
        scores = None
        if shared and self.store is not None and self.shared_scores:  # one client, any worker
            from ..observe.shared import SharedScores

            scores = SharedScores(self.store)
        observed = instrument(
            app,
            app.state.service,
            prometheus=exposition if exposition is not None else False,
            meter_provider=otlp.meter_provider() if otlp and exposition is None else None,
            tracer_provider=otlp.tracer_provider if otlp else None,
            client_key=ClientKey.from_env(),
            scores=scores,
        )
        if otlp is not None:
            observed.on_close(otlp.shutdown)

    def config(self) -> WorkerConfig:
        """The worker configuration this spec describes (secrets read from the environment)."""
        return WorkerConfig(
            level=self.level,
            store=self.store,
            database=self.database,
            admin_token=os.environ.get(self.admin_token_env) or "",
            metrics_token=os.environ.get(self.metrics_token_env) or "",
            protect_graph=self.protect_graph,
            trust=TrustOptions.from_files(self.signing_keys, self.opaque_key_env),
            max_lag_s=self.max_lag_s if self.max_lag_s is not None else DEFAULT_MAX_LAG_S,
            stall_timeout_s=self.stall_timeout_s,
            poll_interval_s=(
                self.poll_interval_s
                if self.poll_interval_s is not None
                else DEFAULT_POLL_INTERVAL_S
            ),
        )

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, text: str | None = None) -> AppSpec:
        raw = json.loads(text if text is not None else os.environ[SPEC_ENV])
        raw["signing_keys"] = tuple(raw.get("signing_keys", ()))
        if raw.get("allowed_hosts") is not None:
            raw["allowed_hosts"] = tuple(raw["allowed_hosts"])
        return cls(**raw)


def app_from_env() -> FastAPI:
    """The app factory a worker process calls (``uvicorn --factory``)."""
    return AppSpec.from_env().build()
