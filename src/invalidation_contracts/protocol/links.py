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
