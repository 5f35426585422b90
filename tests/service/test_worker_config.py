"""One frozen worker configuration (issue 21, item 8): built once, passed to ``create_app`` /
``ContractService.open`` / ``open_runtime``, overridden by keyword options of the same names."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from invalidation_contracts.domains import get_domain
from invalidation_contracts.server import WorkerConfig
from invalidation_contracts.server.config import OPTION_NAMES, WorkerOptions
from invalidation_contracts.server.http import ContractService
from invalidation_contracts.server.http.app import create_app


def test_a_config_is_frozen_and_replace_gives_a_variant() -> None:
    config = WorkerConfig(max_lag_s=3.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_lag_s = 4.0  # type: ignore[misc]
    assert config.replace(protect_graph=True).max_lag_s == 3.0


def test_an_unknown_option_is_a_type_error_naming_it() -> None:
    # mypy refuses it too (``**options: Unpack[WorkerOptions]``, tests/packaging).
    with pytest.raises(TypeError, match=r"option\(s\) max_lag;"):
        create_app(get_domain("acme_billing"), max_lag=3)  # type: ignore[call-arg]


def test_the_keyword_options_are_the_config_s_fields_with_their_types() -> None:
    options = {name: ref.__forward_arg__ for name, ref in WorkerOptions.__annotations__.items()}
    fields = {field.name: field.type for field in dataclasses.fields(WorkerConfig)}
    assert set(options) == OPTION_NAMES
    assert options == fields
    assert WorkerOptions.__required_keys__ == frozenset(), "each option is optional"


@pytest.mark.parametrize("options", [{"max_lag_s": 0.5}, {"level": "L9"}, {"max_body_bytes": 0}])
def test_a_config_that_cannot_work_is_refused_when_built(options: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        WorkerConfig(**options)  # type: ignore[arg-type]


def test_create_app_serves_as_the_config_says_with_keyword_overrides(tmp_path: Path) -> None:
    config = WorkerConfig(store=tmp_path / "r.sqlite", level=1, admin_token="t")
    app = create_app(get_domain("acme_billing"), config, level=6)
    with TestClient(app) as http:
        assert http.get("/contract/graph").status_code == 200, "level 6 from the override"
        assert http.get("/contract/ready").json()["max_lag_s"] == config.max_lag_s
    service = ContractService.open(get_domain("acme_billing"), config)
    try:
        assert int(service.level) == 1 and service.runtime.store is not None
    finally:
        service.close()
