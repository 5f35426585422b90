import asyncio

import httpx
import pytest

from invalidation_contracts.bench.driver import DriftDriver, DriftError
from invalidation_contracts.bench.scenario import DriftEvent
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.server.http.app import create_app


def drive(events, token="t"):
    catalog = get_catalog("acme_billing")
    app = create_app(catalog.domain, admin_token="t")
    shadow = catalog.domain.registry()

    async def go():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://x"
        ) as client:
            driver = DriftDriver(client, catalog, shadow, token)
            return [await driver.apply(e) for e in events], app.state.registry.state

    results, server_state = asyncio.run(go())
    return results, server_state, shadow.state


ROTATION = DriftEvent(
    after_episode=1,
    table="active_csm_codes",
    snapshot="active_csm_codes.rotation-1",
    kind="breaking",
)


def test_a_drift_event_reaches_the_server_and_the_shadow_alike():
    (result,), server, shadow = drive([ROTATION])
    assert result["diff"]["changed"] == ["plan_partner_growth"]
    assert server.versions() == shadow.versions()
    assert server.tables["active_csm_codes"].etags == shadow.tables["active_csm_codes"].etags


def test_a_snapshot_for_another_table_is_refused():
    wrong = ROTATION.model_copy(update={"table": "promo_eligibility"})
    with pytest.raises(DriftError, match="is for table 'active_csm_codes'"):
        drive([wrong])


def test_an_unknown_snapshot_is_a_drift_error_naming_the_known_ones():
    with pytest.raises(DriftError, match="known:"):
        drive([ROTATION.model_copy(update={"snapshot": "nope"})])


def test_a_refused_admin_call_is_a_drift_error_with_the_status():
    with pytest.raises(DriftError, match="403"):
        drive([ROTATION], token="wrong")
