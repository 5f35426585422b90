"""The stamp on a retrofitted route's answer: the contract fields merged into its JSON object.

What a retrofitted route sends is ``json.loads`` of the endpoint's body, updated with the
response-level contract fields, re-encoded as compact JSON (``separators=(",", ":")``,
``ensure_ascii=False``). That definition is the one kept (SPEC §3; a hypothesis test holds this
module to it byte for byte), but a retrofitted app pays it on every answer of its own routes, so
it is computed without the general machinery where the result is provably the same:

- a body that starts with ``{`` followed by a non-NUL byte is the UTF-8 text ``json.loads``
  would decode (its encoding detection only looks at BOMs and NUL bytes), and one scan that
  reaches the end of the text is what ``json.loads`` returns (it would only skip trailing
  whitespace, or refuse what follows): anything else goes through ``json.loads`` itself;
- when the object has none of the fields' names, the update appends the fields after its own
  members, so the compact encoding of the updated object is the encoding of the endpoint's
  object with the fields' members (encoded once per fields object) before its closing brace;
- the compact encoder is built once (``JSONEncoder.encode`` builds the same C encoder on every
  call); the document comes from a JSON parse and the fields from ``model_dump``, so it has no
  cycles to look for.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.responses import Response

from ...protocol.headers import CONTRACT_SINCE, is_json_media_type
from ...protocol.models import ContractFields
from ..state import RegistryState

if TYPE_CHECKING:
    from .service import ContractService

_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_DECODER = json.JSONDecoder()
_CONTENT_LENGTH = b"content-length"
_SINCE = CONTRACT_SINCE.lower().encode("latin-1")
_REPLACED = (_CONTENT_LENGTH, _SINCE)
_JSON = "application/json"


def _compact_encoder() -> Callable[[Any], str]:
    """``_COMPACT.encode`` for a dict without cycles: the C encoder built once when there is one."""
    try:
        from _json import make_encoder
    except ImportError:  # an interpreter without the C accelerator: the encoder as it is
        return _COMPACT.encode
    encode = make_encoder(
        None, _COMPACT.default, json.encoder.encode_basestring, None, ":", ",", False, False, True
    )
    return lambda document: "".join(encode(document, 0))


_encode = _compact_encoder()


def stamp(
    service: ContractService,
    response: Response,
    state: RegistryState,
    since: int | None,
    epoch: str | None,
) -> Response:
    """``response`` with the contract fields of ``state`` merged into its JSON object body."""
    body = getattr(response, "body", None)
    if not isinstance(body, bytes):
        return response
    media = response.media_type or response.headers.get("content-type")
    if media != _JSON and not is_json_media_type(media):
        return response
    try:
        document = _decoded(body)
    except ValueError:
        return response
    if not isinstance(document, dict):
        return response
    content = _merged(document, _encoded(service.contract(state, since, epoch)))
    headers = [(k, v) for k, v in response.raw_headers if k.lower() not in _REPLACED]
    headers.append((_CONTENT_LENGTH, str(len(content)).encode("latin-1")))
    if since is not None:
        headers.append((_SINCE, str(since).encode()))
    if type(response).__call__ is Response.__call__:
        # The endpoint's own response object, sent as a plain Response sends: rewrite it in
        # place (the same header list, which a ``response.headers`` view already made shares).
        response.body = content
        response.raw_headers[:] = headers
        return response
    stamped = Response(content, status_code=response.status_code, background=response.background)
    stamped.raw_headers = headers
    return stamped


def _decoded(body: bytes) -> Any:
    """``json.loads(body)`` (the module docstring says when it takes the short way)."""
    if len(body) > 1 and body[0] == 0x7B and body[1]:
        text = body.decode("utf-8", "surrogatepass")
        document, end = _DECODER.raw_decode(text)
        if end == len(text):
            return document
    return json.loads(body)


def _merged(document: dict[str, Any], fields: tuple[dict[str, Any], bytes]) -> bytes:
    """The compact encoding of ``document`` updated with ``fields`` (dumped, and its members
    encoded)."""
    dumped, members = fields
    if not members or not dumped.keys().isdisjoint(document):
        document.update(dumped)
        return _encode(document).encode("utf-8")
    if not document:
        return b"{" + members + b"}"
    return _encode(document).encode("utf-8")[:-1] + b"," + members + b"}"


def _encoded(fields: ContractFields) -> tuple[dict[str, Any], bytes]:
    """``fields.model_dump(exclude_none=True)`` and its members compactly encoded (without the
    braces), once per fields object: the render cache hands out one object per registry state
    and client position. Read only (``document.update`` copies the top level; the nested values
    are only encoded)."""
    entry = _ENCODED.get(id(fields))
    if entry is not None and entry[0] is fields:
        return entry[1]
    dumped = fields.model_dump(exclude_none=True)
    encoded = (dumped, _encode(dumped).encode("utf-8")[1:-1])
    if len(_ENCODED) >= _ENCODED_BOUND:
        _ENCODED.clear()
    _ENCODED[id(fields)] = (fields, encoded)  # the object is kept: its id is not reused meanwhile
    return encoded


_ENCODED: dict[int, tuple[ContractFields, tuple[dict[str, Any], bytes]]] = {}
_ENCODED_BOUND = 256
