"""Property-based fuzzing of the served OpenAPI document with schemathesis: no input gets a 5xx.

Every documented operation gets valid inputs and (where it has parameters or a body) invalid ones;
admin routes are authenticated so their bodies are reached. Each response must also match the
document: status, content type, and the body against the documented schema (validated here with
Draft 2020-12, since schemathesis' own response check mishandles ``prefixItems``, see
schemathesis/schemathesis#4099). Bounded: a few dozen examples per operation, no shrinking.
"""

from __future__ import annotations

import json

import jsonschema_rs
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, status_code_conformance

from invalidation_contracts.server.http.app import create_app

TOKEN = "s3cret-admin-token"
EXAMPLES = 30


def aimed_at_real_tables(cases, tables):
    """Aim some generated admin bodies at real tables, so row validation is reached, not just
    404."""

    def aim(pair):
        case, table = pair
        if table is not None and isinstance(case.body, dict) and "table" in case.body:
            case.body = {**case.body, "table": table}
        return case

    return st.tuples(cases, st.sampled_from([None, *tables])).map(aim)


def body_validator(document, response, case):
    """The validator of the schema the document gives for this operation, status and media type."""
    operation = document["paths"][case.operation.path][case.method.lower()]
    media_type = response.headers["content-type"][0].split(";")[0]
    schema = operation["responses"][str(response.status_code)]["content"][media_type]["schema"]
    return jsonschema_rs.Draft202012Validator({**schema, "components": document["components"]})


@pytest.mark.parametrize(
    "mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda m: m.value
)
def test_no_input_gets_a_server_error_and_every_answer_matches_the_document(domain, tmp_path, mode):
    app = create_app(domain, admin_token=TOKEN, store=tmp_path / "fuzz.db")
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    document = app.openapi()
    # The watch stream never ends by itself, and the ASGI transport buffers a whole answer: its
    # bad input is covered in test_watch.py against a real server.
    operations = [
        op
        for op in (result.ok() for result in schema.get_all_operations())
        if op.path != "/contract/watch"
    ]
    assert len(operations) == 14
    if mode is GenerationMode.NEGATIVE:
        operations = [op for op in operations if op.body or op.query or op.headers]
    try:
        for operation in operations:

            @given(
                case=aimed_at_real_tables(
                    operation.as_strategy(generation_mode=mode), domain.tables
                )
            )
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            def fuzz(case):
                response = case.call_and_validate(
                    headers={"Authorization": f"Bearer {TOKEN}"},
                    checks=[not_a_server_error, status_code_conformance, content_type_conformance],
                )
                body_validator(document, response, case).validate(json.loads(response.content))

            fuzz()
    finally:
        app.state.store.close()
