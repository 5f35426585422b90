"""Domains are built only on the provider's public API, as a third-party domain would be."""

import ast
from pathlib import Path

from invalidation_contracts import protocol, server

DOMAINS = Path(__file__).parents[2] / "src" / "invalidation_contracts" / "domains"
PUBLIC = {
    "invalidation_contracts.server": set(server.__all__),
    "invalidation_contracts.protocol": set(protocol.__all__),
    # The optional-dependency guard every edge module uses (the Stripe backend's `stripe` extra).
    "invalidation_contracts._extras": {"MissingExtra", "require_extra"},
}


def project_imports(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module.startswith("invalidation_contracts")
        ):
            yield node.module, [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("invalidation_contracts"):
                    yield alias.name, []


def test_domains_import_only_the_public_server_and_protocol_api():
    offending = []
    for path in sorted(DOMAINS.rglob("*.py")):
        for module, names in project_imports(path):
            allowed = PUBLIC.get(module)
            if allowed is None or not set(names) <= allowed:
                offending.append(f"{path.relative_to(DOMAINS)}: {module} {names}")
    assert offending == []
