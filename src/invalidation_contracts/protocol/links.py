"""Where a server's contract routes live: the ``Link`` header every contract response carries.

``Link: </api/contract>; rel="urn:invalidation-contracts:contract"`` (RFC 8288; the relation is
an extension relation type, a URI in the namespace of the problem types) names the base the
contract routes hang from: ``{base}/changes``, ``{base}/rules``, ``{base}/graph``. A client fetches
them there rather than at the origin's root, so a contract router mounted under any prefix serves
row-precise invalidation (docs/SPEC.md §8). Pure logic: parsing is bounded, and a value this
module cannot read is no link at all.
"""

from __future__ import annotations

import re
from urllib.parse import quote

CONTRACT_RELATION = "urn:invalidation-contracts:contract"
"""The link relation type of the contract's location."""
DEFAULT_CONTRACT_PATH = "/contract"
"""Where the contract routes live when no link says otherwise (the standalone app)."""
MAX_LINK_HEADER_BYTES = 4096
"""A ``Link`` header longer than this is not read (a server controls it)."""
MAX_CONTRACT_PATH = 512
"""The longest contract location a client keeps."""

_LINK = re.compile(
    r'\s*<([^<>]*)>\s*((?:;\s*[!#$%&\'*+.^_`|~0-9A-Za-z-]+\s*=\s*(?:"[^"]*"|[^;,"\s]*)\s*)*)'
)
_PARAM = re.compile(r';\s*([!#$%&\'*+.^_`|~0-9A-Za-z-]+)\s*=\s*(?:"([^"]*)"|([^;,"\s]*))')


def link_header(base: str) -> str:
    """The ``Link`` value naming ``base`` (an absolute path) as the contract's location."""
    return f'<{base}>; rel="{CONTRACT_RELATION}"'


def contract_target(value: str | None) -> str | None:
    """The target (a URI reference) of the first link in ``value`` whose ``rel`` includes the
    contract relation, or None (absent, too long, or unreadable)."""
    if not value or len(value) > MAX_LINK_HEADER_BYTES:
        return None
    position = 0
    while position < len(value):
        match = _LINK.match(value, position)
        if match is None:
            return None
        target, params = match.group(1), match.group(2)
        for name, quoted, bare in _PARAM.findall(params):
            relations = (quoted if quoted else bare).split()
            if name.lower() == "rel" and CONTRACT_RELATION in relations:
                return target.strip() if len(target) <= MAX_CONTRACT_PATH else None
        position = match.end()
        if position < len(value) and value[position] != ",":
            return None
        position += 1
    return None


#: Where a server serves its reference rows as plain resources, each with an ``ETag``.
RESOURCE_PATH = "/resources"
CITES_RELATION = "related"
"""The relation of a ``Link`` that cites the resource a suggestion read (RFC 8288 ``related``)."""
_SUGGESTION_ANCHOR = "#/recovery_feedback/suggestions/"
#: Citations a client keeps per response (a server controls them).
MAX_CITATIONS = 64


def resource_path(table: str, key: str | None = None) -> str:
    """The path of one row (``/resources/{table}/{key}``) or of a table's key set."""
    path = f"{RESOURCE_PATH}/{quote(table, safe='')}"
    return path if key is None else f"{path}/{quote(key, safe='')}"


def citation(index: int, path: str) -> str:
    """The ``Link`` value citing ``path`` as a resource suggestion ``index`` read: its anchor is
    the suggestion's JSON Pointer in the problem document."""
    return f'<{path}>; rel="{CITES_RELATION}"; anchor="{_SUGGESTION_ANCHOR}{index}"'


def citations(values: list[str]) -> dict[int, tuple[str, ...]]:
    """The resources each suggestion (by index) cites, from a response's ``Link`` values: links
    of relation ``related`` anchored at a suggestion, whose target is an absolute path. What this
    cannot read is no citation at all (bounded, like ``contract_target``)."""
    cited: dict[int, list[str]] = {}
    count = 0
    for value in values:
        if not value or len(value) > MAX_LINK_HEADER_BYTES:
            continue
        position = 0
        while position < len(value) and count < MAX_CITATIONS:
            match = _LINK.match(value, position)
            if match is None:
                break
            target, params = match.group(1).strip(), match.group(2)
            found = {
                name.lower(): (quoted if quoted else bare)
                for name, quoted, bare in _PARAM.findall(params)
            }
            anchor = found.get("anchor", "")
            index = anchor[len(_SUGGESTION_ANCHOR) :]
            if (
                CITES_RELATION in found.get("rel", "").split()
                and anchor.startswith(_SUGGESTION_ANCHOR)
                and index.isdigit()
                and len(index) < 6
                and target.startswith("/")
                and not target.startswith("//")
                and len(target) <= MAX_CONTRACT_PATH
            ):
                cited.setdefault(int(index), []).append(target)
                count += 1
            position = match.end()
            if position < len(value) and value[position] != ",":
                break
            position += 1
    return {index: tuple(dict.fromkeys(paths)) for index, paths in cited.items()}
