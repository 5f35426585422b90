"""Every shell command of README.md and docs/ runs, as a reader runs it, or is listed here.

Each block runs in a fresh temporary folder (tests/docs/runner.py: the checkout's top-level entries
are linked in, so the docs' relative paths resolve), command after command, each with a timeout,
and each must exit 0. Servers start on a free 127.0.0.1 port, are probed once they print their
address, serve the block's later commands (curl, ``memory``, ``graph`` …), and are terminated at
the end of the block. A block that names ``postgresql://…@db/…`` gets the suite's PostgreSQL; a
block tagged ``toml``/``json`` whose first line is ``# NAME`` is a file the page's commands use,
written into the folder. What cannot run here is on ``SKIP`` (with why), runs in another test
(``ELSEWHERE``, named), or is grid-sized and runs under the ``study`` marker (``STUDY``).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from .runner import Folder, Server, folder, tail, wait_for_answer
from .snippets import (
    ROOT,
    Block,
    Command,
    TableCommand,
    blocks,
    commands,
    shell_blocks,
    table_commands,
)
from .test_guide_figures import check_paper_grid
from .test_without_contract import WITHOUT_CONTRACT

INSTALL = (
    "an install step: it builds the environment this test already runs in; .ci/run runs the "
    "README's install and test lines verbatim from a fresh clone, and test_docs_snippets checks "
    "that every extra named exists"
)
#: Command prefixes (words) that do not run here, and why. Keep it short.
SKIP: dict[str, str] = {
    "python3 -m venv": INSTALL,
    ".": INSTALL,
    "pip install": INSTALL,
    "pytest": "the test suite itself: CI runs it (.ci/run: `pytest`, then `pytest -m study`)",
    "pytest tests/trust tests/client/test_bounds.py": (
        "a part of the suite this test belongs to; the files it names are checked to exist"
    ),
    "invalidation-contracts ladder --planner local:qwen2.5-coder-0.5b": (
        "needs the real model and about 70 min per seed on 2 cores; the README table it produced "
        "is checked against its committed artifacts (test_docs_figures)"
    ),
    "invalidation-contracts run --planner anthropic:": "needs an Anthropic API key",
    "docker": (
        "needs a container runtime (CI has none): tests/deploy/test_deployed_serve.py lints the "
        "Dockerfile and runs the image's command directly"
    ),
}
#: Commands run as written by another test (under its own markers).
ELSEWHERE: dict[str, str] = {
    "invalidation-contracts mcp-proxy -- invalidation-contracts serve-mcp --domain acme_billing": (
        "tests/docs/test_hosts_recipes.py::"
        "test_a_host_configured_from_the_recipe_gets_a_fix_learned_in_one_session_in_the_next"
    ),
    "invalidation-contracts ladder": (
        "tests/docs/test_docs_figures.py::test_the_readme_ladder_table_is_what_ladder_prints"
    ),
    "invalidation-contracts db remove-table funding_types --db postgresql://api@db/api": (
        "tests/server/test_mixed_versions.py::"
        "test_db_remove_table_removes_it_in_the_same_history_and_running_workers_follow"
    ),
    "invalidation-contracts preflight --planner local:qwen2.5-coder-0.5b --concurrency 2": (
        "tests/real_model/test_local_model.py::"
        "test_preflight_round_answers_every_probe_with_a_request_body"
    ),
    # A grid-sized command in a file of its own: a file is one xdist worker's job (loadfile), so
    # it runs beside the paper grid instead of after it.
    WITHOUT_CONTRACT: (
        "tests/docs/test_without_contract.py::"
        "test_the_pages_grid_runs_as_written_and_writes_the_table_and_figure_the_page_shows"
    ),
}
#: Grid-sized commands (minutes of CPU): run by test_grid_sized_commands_run, under ``study``,
#: then the pages' figures of what they wrote are checked against it.
STUDY: dict[str, Callable[[Path], None]] = {
    "invalidation-contracts run --grid paper": lambda folder: check_paper_grid(folder / "results"),
}

SHELL = shell_blocks()
FILE_BLOCK = re.compile(r"^# ([\w.-]+\.(toml|json))\n")


def text(command: Command) -> str:
    return " ".join(command.words)


def disposition(command: Command) -> str | None:
    """Why the command does not run in its block's test (None: it does)."""
    words = text(command)
    if words in ELSEWHERE:
        return f"run by {ELSEWHERE[words]}"
    if words in STUDY:
        return "run under study"
    prefixes = [p for p in SKIP if _starts(words, p)]
    return SKIP[max(prefixes, key=len)] if prefixes else None


def _subcommands() -> list[str]:
    import argparse

    from invalidation_contracts.cli import build_parser

    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


def _starts(words: str, prefix: str) -> bool:
    """``prefix`` is the command's first words (a prefix ending ``:`` may end mid-word)."""
    return words == prefix or words.startswith(prefix if prefix.endswith(":") else prefix + " ")


def is_server(command: Command) -> bool:
    words = command.words
    if words[:2] == ("invalidation-contracts", "serve"):
        return True
    if words[:2] == ("invalidation-contracts", "serve-mcp"):
        return "--transport" in words and words[words.index("--transport") + 1] == "http"
    return words[0] == "uvicorn"


def runs(block: Block) -> list[Command]:
    return [c for c in commands(block.body) if not c.synopsis and disposition(c) is None]


def marks(block: Block) -> list[pytest.MarkDecorator]:
    found = []
    if "postgresql://" in block.body:
        found.append(pytest.mark.postgres)
    if "--workers" in block.body or "uvicorn" in block.body:
        found.append(pytest.mark.workers)
    if "serve-mcp" in block.body:
        found.append(pytest.mark.mcp)
    if re.search(r"--transport (pydantic-ai|openai-agents|langchain)", block.body):
        found.append(pytest.mark.frameworks)
    return found


# --- the README's table of commands: a summary; each row runs, or its subcommand runs elsewhere --

TABLE = table_commands()
#: Table entries that are not commands of their own, or cannot run here.
TABLE_SKIP: dict[str, str] = {
    "python -m benchmarks": (
        "performance studies (minutes to an hour of CPU at full size); what the docs quote of "
        "them is read from benchmarks/results.json (test_guide_figures), never rerun here"
    ),
    "mcp-http --mcp-notifications": "a value of `run --transport` beside `mcp`, not a command",
}
SUBCOMMANDS = set(_subcommands())


def table_words(entry: TableCommand) -> list[str]:
    """The entry's words, ``invalidation-contracts`` put back where the row abbreviates it."""
    words = entry.text.split()
    return ["invalidation-contracts", *words] if words[0] in SUBCOMMANDS else words


def placeholder(entry: TableCommand) -> bool:
    """Written with placeholders (``URL``, ``[NAME]``, ``…``) or abbreviated: not runnable."""
    if not entry.text.startswith("invalidation-contracts "):
        return True
    return bool(re.search(r"\[|…|\.\.\.|(?<![\w:.-])[A-Z][A-Z_]*(?![\w.-])", entry.text))


def verb(words: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    return tuple(words[1:3]) if words[1] in ("memory", "db") else tuple(words[1:2])


#: Subcommands a fenced block runs (here, under study, or in the test named in ELSEWHERE).
RUN_VERBS = {
    verb(c.words)
    for b in SHELL
    for c in commands(b.body)
    if c.words[0] == "invalidation-contracts"
    and not c.synopsis
    and disposition(c) in (None, *[f"run by {t}" for t in ELSEWHERE.values()], "run under study")
}


def table_runs(entry: TableCommand) -> bool:
    """A concrete entry whose subcommand no block runs is run as written."""
    words = table_words(entry)
    return not placeholder(entry) and _table_skip(entry) is None and verb(words) not in RUN_VERBS


def _table_skip(entry: TableCommand) -> str | None:
    for prefix, reason in TABLE_SKIP.items():
        if entry.text.startswith(prefix):
            return reason
    command = Command(tuple(table_words(entry)), entry.text, False)
    return disposition(command)


def _as_block(entry: TableCommand) -> Block:
    return Block(entry.page, entry.line, "table", entry.text + "\n", "")


RUNNABLE = [pytest.param(b, marks=marks(b), id=b.where) for b in SHELL if runs(b)]
RUNNABLE += [
    pytest.param(_as_block(e), marks=marks(_as_block(e)), id=f"{e.where}:{e.text}")
    for e in TABLE
    if table_runs(e)
]


# --- what a block needs before it runs -----------------------------------------------------------


def page_files(block: Block, where: Path) -> None:
    """The files the block's page shows (a ``toml``/``json`` block starting ``# NAME``)."""
    for shown in blocks():
        if shown.page == block.page and (named := FILE_BLOCK.match(shown.body)) is not None:
            (where / named[1]).write_text(shown.body, encoding="utf-8")


def external_domain(here: Folder) -> None:
    """researchers.md's "Domains outside the package": the shipping domain package of
    tests/domains/test_external_domain.py on the path, and ``my-stream.toml`` its manifest."""
    path = ROOT / "tests" / "domains" / "test_external_domain.py"
    spec = importlib.util.spec_from_file_location("docs_external_domain", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    site = here.path / "site"
    package = site / module.PACKAGE
    module._write(package / "__init__.py", module.INIT)
    module._write(package / "tasks.toml", module.TASKS)
    rows = {"NO": {"carrier": "posten"}, "SE": {"carrier": "postnord"}}
    table = {"table": "country_carriers", "version": "1.0.0", "rows": rows}
    module._write(package / "data" / "country_carriers.json", _json(table))
    drifted = {"table": "country_carriers", "rows": {**rows, "NO": {"carrier": "bring"}}}
    module._write(package / "snapshots" / "country_carriers.norway-bring.json", _json(drifted))
    module._write(package / "rules" / "initial.json", _json({"rules": []}))
    manifest = module.MANIFEST.format(domain=f"{module.PACKAGE}:catalog")
    module._write(here.path / "my-stream.toml", manifest)
    here.env["PYTHONPATH"] = f"{site}:{here.env['PYTHONPATH']}"


def acme_tables(here: Folder) -> None:
    """providers.md's ``db upgrade`` runs on a database that holds the domain's tables."""
    from invalidation_contracts.domains import get_domain
    from invalidation_contracts.server.sql import create_tables

    assert here.postgres_url is not None
    create_tables(here.postgres_url, get_domain("acme_billing"))


def shop_plans(here: Folder) -> None:
    """providers.md's retrofitted shop served by uvicorn: the shop's own ``plans`` table exists in
    its database (PostgreSQL, or ``shop.db``), as the example's ``main`` makes it."""
    from sqlalchemy import create_engine, text

    url = here.postgres_url or f"sqlite:///{here.path / 'shop.db'}"
    engine = create_engine(url)
    with engine.begin() as db:
        db.execute(text("CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT NOT NULL)"))
        db.execute(text("INSERT INTO plans VALUES ('basic', 'card'), ('enterprise', 'invoice')"))
    engine.dispose()


def _json(value: object) -> str:
    import json

    return json.dumps(value)


#: Set-up a block needs beyond its page's files, by a phrase of the block.
SETUP: dict[str, Callable[[Folder], None]] = {
    "my-stream.toml": external_domain,
    "db upgrade --domain acme_billing": acme_tables,
    "retrofit_app:create": shop_plans,
}


def graph_figures(block: Block, output: str) -> None:
    """The page's graph size ("The graph has N nodes and M edges") is what ``graph`` prints."""
    size = re.search(r"^(\d+) nodes, (\d+) edges", output, re.M)
    assert size is not None, output
    page = block.page.read_text(encoding="utf-8")
    if "The graph has" in page:
        assert f"The graph has {size[1]} nodes and {size[2]} edges" in page, size[0]
    assert f"# {size[1]} nodes, {size[2]} edges" in block.body


#: Checks of what a command printed against the figures its page quotes, by command prefix.
OUTPUT_CHECKS: dict[str, Callable[[Block, str], None]] = {
    "invalidation-contracts graph": graph_figures,
}


# --- probes --------------------------------------------------------------------------------------


def probe(server: Server, command: Command) -> None:
    """One real request to a server the block started, by the kind of server."""
    if command.words[0] == "uvicorn":
        assert wait_for_answer(f"{server.url}/health").status_code == 200
    elif command.words[1] == "serve":
        answer = wait_for_answer(f"{server.url}/contract/versions")
        assert answer.status_code == 200, answer.text
        assert "tables" in answer.json() or answer.json()
    else:
        assert anyio.run(_mcp_tools, server.url), f"{server.url}: no tools listed"


async def _mcp_tools(url: str) -> list[Any]:
    from invalidation_contracts.client import FixMemory
    from invalidation_contracts.mcp import connect

    with FixMemory("row") as memory:
        async with connect(url, memory) as tools:
            return list(await tools.list_tools())


# --- the tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("block", RUNNABLE)
def test_every_command_of_the_block_runs_as_written(block: Block, tmp_path, request) -> None:
    with folder(tmp_path, list(sys.path)) as here:
        if "postgresql://" in block.body:
            here.postgres_url = request.getfixturevalue("postgres_url")
        page_files(block, here.path)
        for phrase, setup in SETUP.items():
            if phrase in block.body:
                setup(here)
        for command in runs(block):
            if is_server(command):
                server = here.start(command)
                try:
                    probe(server, command)
                except Exception as exc:
                    raise AssertionError(f"{command.line}: {exc!r}\n{tail(server.log)}") from exc
            else:
                output = here.run(command)
                for prefix, check in OUTPUT_CHECKS.items():
                    if text(command).startswith(prefix):
                        check(block, output)
        for server in here.servers:
            assert server.process.poll() is None, f"a server of {block.where} died"


def test_every_command_in_the_docs_runs_or_is_listed_with_why() -> None:
    for block in SHELL:
        for command in commands(block.body):
            if command.synopsis:
                continue
            assert runs(block) and command in runs(block) or disposition(command), command


def test_every_listed_command_is_in_the_docs_and_every_named_test_exists() -> None:
    written = {text(c) for b in SHELL for c in commands(b.body)}
    for entry in [*ELSEWHERE, *STUDY]:
        assert entry in written, f"{entry!r} is listed but no page shows it"
    for prefix in SKIP:
        assert any(_starts(w, prefix) for w in written), f"{prefix!r} is listed but not shown"
    for node in ELSEWHERE.values():
        path, name = node.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(encoding="utf-8"), node


def test_every_synopsis_has_a_runnable_example_on_its_page() -> None:
    """A synopsis (``[--opt]``, ``<...>``) cannot run; a concrete command of it must, nearby."""
    for block in SHELL:
        for synopsis in [c for c in commands(block.body) if c.synopsis]:
            verb = [w for w in synopsis.words[1:3] if not w.startswith("-")]
            examples = [
                c
                for other in SHELL
                if other.page == block.page
                for c in runs(other)
                if list(c.words[1 : 1 + len(verb)]) == verb
            ]
            assert examples, f"{block.where}: `{synopsis.line[:60]}` has no runnable example"


@pytest.mark.study
@pytest.mark.timeout(1200)  # the command may take its 900 s; the suite's 600 s would cut it first
@pytest.mark.parametrize(
    "command",
    [
        pytest.param(c, id=text(c), marks=[pytest.mark.tau2] if "tau2-" in text(c) else [])
        for b in SHELL
        for c in commands(b.body)
        if text(c) in STUDY
    ],
)
def test_grid_sized_commands_run_and_give_the_figures_the_pages_quote(
    command: Command, tmp_path
) -> None:
    with folder(tmp_path, list(sys.path)) as here:
        here.run(command, timeout=900)
        STUDY[text(command)](here.path)


@pytest.mark.parametrize("entry", TABLE, ids=lambda e: f"{e.where}:{e.text[:40]}")
def test_every_command_of_a_commands_table_runs_or_its_subcommand_runs_in_a_block(
    entry: TableCommand,
) -> None:
    from invalidation_contracts.cli import build_parser

    from .test_docs_snippets import _check_cli

    if entry.text.startswith(tuple(TABLE_SKIP)):
        return
    words = table_words(entry)
    assert words[0] == "invalidation-contracts", f"{entry.where}: not a command: {entry.text}"
    _check_cli(Command(tuple(words), " ".join(words), placeholder(entry)))
    if placeholder(entry) or _table_skip(entry) is not None:
        assert verb(words) in RUN_VERBS, f"{entry.where}: no block runs `{' '.join(verb(words))}`"
    else:
        build_parser().parse_args(words[1:])
        assert table_runs(entry) or verb(words) in RUN_VERBS
