"""Signed statements bind the request they answer and carry its position (issue 38 item 5): an
on-path party that replays a signed answer to another operation, or an answer older than the
memory's position, changes nothing (``protocol.signing``, ``client.responses``)."""

from __future__ import annotations

import httpx
import pytest
from test_signing import BODY, NOW, public, requiring, signing_app
from trust_helpers import GROWTH, OPERATION, ORIGIN, Session, asgi, rotate_growth_code

from invalidation_contracts.client.events import Evicted, Ignored
from invalidation_contracts.client.memory import FixMemory
from invalidation_contracts.client.trust import TrustPolicy
from invalidation_contracts.protocol.signing import (
    Binding,
    SignatureError,
    read_header,
    sign,
    verify,
)

SENT = Binding("POST /v1/subscriptions", "acme.test")


class Replayer(httpx.AsyncBaseTransport):
    """An on-path party: records every answer; when armed, answers the next request with a
    recorded one (body, status and headers, signature included) instead of asking the server."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.recorded: list[tuple[int, dict[str, str], bytes]] = []
        self.replay: tuple[int, dict[str, str], bytes] | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.replay is not None:
            (status, headers, content), self.replay = self.replay, None
            return httpx.Response(status, headers=headers, content=content)
        response = await self.inner.handle_async_request(request)
        content = await response.aread()
        headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
        self.recorded.append((response.status_code, headers, content))
        return httpx.Response(response.status_code, headers=headers, content=content)


def bound(keys, binding):
    return sign(BODY, keys["k1"], "k1", since=None, iat=NOW, exp=NOW + 300, binding=binding)


def check(keys, jws, binding, **options):
    return verify(jws, BODY, public(keys), since=None, now=NOW, binding=binding, **options)


# -- the statement ---------------------------------------------------------------------------


def test_the_statement_binds_the_request_in_its_protected_header(keys):
    header = read_header(bound(keys, SENT))
    assert (header.req, header.aud) == ("POST /v1/subscriptions", "acme.test")


def test_a_statement_for_another_route_is_refused(keys):
    jws = bound(keys, SENT)
    with pytest.raises(SignatureError, match="not the request sent 'POST /v1/refunds'"):
        check(keys, jws, Binding("POST /v1/refunds", "acme.test"))


def test_a_statement_for_another_host_is_refused(keys):
    with pytest.raises(SignatureError, match="issued for 'acme.test'"):
        check(keys, bound(keys, SENT), Binding("POST /v1/subscriptions", "other.test"))


def test_a_changed_binding_breaks_the_signature(keys):
    encoded, _, signature = bound(keys, SENT).split(".")
    other = bound(keys, Binding("POST /v1/refunds", "acme.test")).split(".")[0]
    with pytest.raises(SignatureError, match="does not match"):
        check(keys, f"{other}..{signature}", None)
    assert encoded != other


def test_an_unbound_statement_of_an_older_server_is_accepted_unless_the_binding_is_required(keys):
    jws = bound(keys, None)
    assert check(keys, jws, SENT).req is None
    with pytest.raises(SignatureError, match="binds no request"):
        check(keys, jws, SENT, require_binding=True)


# -- an agent requiring signatures, against the real provider --------------------------------


def test_a_signed_422_replayed_as_the_answer_to_another_operation_is_not_learned_there(keys):
    replayer = Replayer(asgi(signing_app(keys)))
    session = Session(requiring(keys), replayer)
    session.post(GROWTH)
    (taught,) = [r for r in replayer.recorded if r[0] == 422]

    replayer.replay = taught
    session.post(GROWTH, path="/v1/refunds")

    assert [e.key.operation for e in session.memory.entries(ORIGIN)] == [OPERATION]
    assert any("not the request sent 'POST /v1/refunds'" in e.detail for e in session.of(Ignored))


def test_a_signed_422_older_than_the_memorys_position_evicts_nothing(keys):
    app = signing_app(keys)
    replayer = Replayer(asgi(app))
    session = Session(requiring(keys), replayer)
    session.post(GROWTH)  # learns the growth code at the first position
    (old,) = [r for r in replayer.recorded if r[0] == 422]
    rotate_growth_code(app)
    session.post(GROWTH)  # the rotation: the old fix goes, the new code is learned
    (current,) = session.memory.entries(ORIGIN)
    evicted = len(session.of(Evicted))

    replayer.replay = old  # the old signed 422, still within its lifetime, as the next answer
    session.post(GROWTH)

    assert [e.id for e in session.memory.entries(ORIGIN)] == [current.id]
    assert len(session.of(Evicted)) == evicted
    assert any("older than the memory's position" in e.detail for e in session.of(Ignored))


def test_a_client_without_keys_checks_no_binding(keys):
    replayer = Replayer(asgi(signing_app(keys)))
    session = Session(FixMemory("row", trust=TrustPolicy()), replayer)
    session.post(GROWTH)

    assert len(session.memory.entries(ORIGIN)) == 1 and session.of(Ignored) == []


@pytest.mark.mcp
def test_over_mcp_a_tool_result_is_signed_for_its_tool_and_verified_against_the_call(keys):
    import anyio

    from invalidation_contracts.domains import get_catalog
    from invalidation_contracts.mcp import connect, contract_server
    from invalidation_contracts.mcp.backend import ProviderBackend
    from invalidation_contracts.server import Provider
    from invalidation_contracts.server.signing import StampSigner

    acme = get_catalog("acme_billing")
    signer = StampSigner(keys, active="k1")
    heard: list[str] = []

    class SigningBackend(ProviderBackend):
        @property
        def signer(self) -> StampSigner:
            return signer

    server = contract_server(
        SigningBackend(Provider(acme.domain)), tool_names={OPERATION: "create_subscription"}
    )
    memory = requiring(keys)

    async def body() -> None:
        async with connect(server, memory) as tools:
            reply = await tools.call_tool("create_subscription", GROWTH)
            heard.extend(str(e.to_dict()) for e in reply.events)

    anyio.run(body)

    (entry,) = [e for o in memory.origins() for e in memory.entries(o)]
    assert entry.key.operation == "create_subscription"
    assert not any("unverified" in line for line in heard)
