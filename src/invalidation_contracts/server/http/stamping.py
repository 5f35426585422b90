"""The stamp on a retrofitted route's answer: the contract fields added to its JSON object.

A body that is a JSON object gains the response-level contract fields (SPEC §3), and is otherwise
the endpoint's own (a hypothesis test holds this module to this definition byte for byte). A body
*spliced* is the endpoint's bytes with the fields' members (compact JSON, ``ensure_ascii=False``)
added before its closing brace, after a ``,`` when the object has members of its own: nothing the
endpoint wrote is re-encoded (its number formats, escapes and spacing stay).

- **spliced, unread**: a body labelled JSON that starts with ``{`` and a byte other than NUL, ends
  with ``}``, and holds neither a ``\\u`` nor any of the fields' names in quotes. Such bytes are
  not parsed, so the stamp costs a few substring searches and one copy, whatever the body's size
  (parsing cost ~11 µs per KB: a 20 KB answer paid more than the whole contract). The searches
  are few: a byte every name holds (``_``, one ``memchr``) first, then one search per substring
  the names share (``_version``, ``"contract_``), each name only where its shared part occurs (a
  substring search costs ~0.3 µs per KB, four of them 30 µs on a 20 KB answer). For JSON the
  splice is exactly what reading it would give: the text is UTF-8 and one object, and a member
  the contract names could only be spelled literally or with ``\\u``. The stamp does not validate
  the endpoint's JSON: bytes of that shape that are not JSON are spliced as they are;
- **spliced, read**: otherwise, when the body is UTF-8 text that starts with ``{``, the object
  ends the body and has none of the fields' names as members (one ``raw_decode``: what
  ``json.loads`` returns when it reaches the end of the text, ``json.loads``' encoding detection
  only looking at BOMs and NUL bytes);
- **re-encoded**: any other JSON object body (another encoding or a BOM, whitespace after the
  object, or a member the contract names) is ``json.loads`` of it, updated with the fields,
  re-encoded as compact JSON (``separators=(",", ":")``, ``ensure_ascii=False``);
- anything else (not JSON, not an object, not a JSON media type) is sent as it is.

The fields' members, names and searches are made once per fields object, and the compact encoder
is built once (``JSONEncoder.encode`` builds the same C encoder on every call).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from starlette.responses import Response

from ...protocol.headers import CONTRACT_SINCE, is_json_media_type
from ...protocol.models import ContractFields
from ..state import RegistryState


class Stamping(Protocol):
    """What stamping an answer needs: the contract fields of a state."""

    def contract(
        self, state: RegistryState, since: int | None = None, epoch: str | None = None
    ) -> ContractFields: ...


_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_DECODER = json.JSONDecoder()
_CONTENT_LENGTH = b"content-length"
_SINCE = CONTRACT_SINCE.lower().encode("latin-1")
_REPLACED = (_CONTENT_LENGTH, _SINCE)
_JSON = "application/json"
_WHITESPACE = b" \t\n\r"  # JSON's

#: Substrings the fields' names in quotes share (``"table_versions"`` and ``"rules_version"``;
#: ``"contract_seq"`` and ``"contract_epoch"``): one search of a body for each stands for the
#: names that hold it (a name that holds none is searched for itself).
_SHARED = (b"_version", b'"contract_')

Search = tuple[bytes, tuple[bytes, ...]]
"""A substring to look for, and the names to look for when it occurs (none: it is a name)."""
Fields = tuple[dict[str, Any], bytes, tuple[bytes, ...], tuple[Search, ...], bytes | None]
"""One answer's contract fields: dumped, their members encoded, their names as JSON strings, the
searches that find any of the names in a body, and a byte every name holds (None: no such byte),
absent from most bodies, so one ``memchr`` spares them the searches."""


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
    service: Stamping,
    response: Response,
    state: RegistryState,
    since: int | None,
    epoch: str | None,
) -> Response:
    """``response`` with the contract fields of ``state`` added to its JSON object body."""
    body = getattr(response, "body", None)
    if not isinstance(body, bytes):
        return response
    media = response.media_type or response.headers.get("content-type")
    if media != _JSON and not is_json_media_type(media):
        return response
    fields = _fields(service, state, since, epoch)
    content = _unread(body, fields)
    if content is None:
        try:
            document, kept = _decoded(body)
        except ValueError:
            return response
        if not isinstance(document, dict):
            return response
        content = _stamped(body, document, kept, fields)
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


def _unread(body: bytes, fields: Fields) -> bytes | None:
    """The body *spliced, unread* (the module docstring), or None when its bytes do not prove
    the splice is what reading it would give."""
    if len(body) < 2 or body[0] != 0x7B or body[-1] != 0x7D or not body[1]:
        return None
    if b"\\" in body and b"\\u" in body:  # one byte's search (memchr) first: most have none
        return None
    _, members, _, searches, held = fields
    if held is None or held in body:
        for shared, names in searches:
            if shared in body and (not names or any(name in body for name in names)):
                return None
    first = 1
    while body[first] in _WHITESPACE:  # stops at the closing brace at the latest
        first += 1
    return _spliced(body, members, first < len(body) - 1)


def _decoded(body: bytes) -> tuple[Any, bool]:
    """``json.loads(body)``, and whether the body is one a stamp keeps (the module docstring)."""
    if len(body) > 1 and body[0] == 0x7B and body[1]:
        text = body.decode("utf-8", "surrogatepass")
        document, end = _DECODER.raw_decode(text)
        if end == len(text):
            return document, True
    return json.loads(body), False


def _stamped(body: bytes, document: dict[str, Any], kept: bool, fields: Fields) -> bytes:
    """The stamped body of a JSON object ``body`` (decoded: ``document``; ``kept``: its bytes may
    stay), with ``fields`` (dumped, and its members encoded)."""
    dumped, members = fields[0], fields[1]
    if kept and dumped.keys().isdisjoint(document):
        return _spliced(body, members, bool(document))
    document.update(dumped)
    return _encode(document).encode("utf-8")


def _spliced(body: bytes, members: bytes, own: bool) -> bytes:
    """The object ``body`` with ``members`` added before its closing brace (after a ``,`` when
    it has members of its ``own``)."""
    if not members:
        return body
    # One copy of the body (a ``memoryview`` slice is not one; ``+`` would copy it three times).
    return b"".join((memoryview(body)[:-1], b"," if own else b"", members, b"}"))


def _fields(
    service: Stamping, state: RegistryState, since: int | None, epoch: str | None
) -> Fields:
    """``_encoded(service.contract(state, since, epoch))``, the last one kept: the contract
    fields are a function of these four (a new registry state is a new object), and most
    answers in a row are of one state to clients at one position."""
    last = _LAST[0]
    if (
        last is not None
        and last[0] is service
        and last[1] is state
        and last[2] == since
        and last[3] == epoch
    ):
        return last[4]
    encoded = _encoded(service.contract(state, since, epoch))
    _LAST[0] = (service, state, since, epoch, encoded)
    return encoded


def _encoded(fields: ContractFields) -> Fields:
    """``fields.model_dump(exclude_none=True)``, its members compactly encoded (without the
    braces) and its names as JSON strings, once per fields object: the render cache hands out
    one object per registry state and client position. Read only (``document.update`` copies
    the top level; the nested values are only encoded)."""
    entry = _ENCODED.get(id(fields))
    if entry is not None and entry[0] is fields:
        return entry[1]
    dumped = fields.model_dump(exclude_none=True)
    names = tuple(_encode(name).encode("utf-8") for name in dumped)
    members = _encode(dumped).encode("utf-8")[1:-1]
    encoded = (dumped, members, names, _searches(names), _held_by_all(names))
    if len(_ENCODED) >= _ENCODED_BOUND:
        _ENCODED.clear()
    _ENCODED[id(fields)] = (fields, encoded)  # the object is kept: its id is not reused meanwhile
    return encoded


_ENCODED: dict[int, tuple[ContractFields, Fields]] = {}
_ENCODED_BOUND = 256
_LAST: list[tuple[Stamping, RegistryState, int | None, str | None, Fields] | None] = [None]


def _searches(names: tuple[bytes, ...]) -> tuple[Search, ...]:
    """What finds any of ``names`` in a body: each shared substring with the names that hold it,
    then each name that holds none (``_SHARED``)."""
    grouped = [(shared, tuple(n for n in names if shared in n)) for shared in _SHARED]
    covered = {n for _, held in grouped for n in held}
    alone = [(name, ()) for name in names if name not in covered]
    return (*((shared, held) for shared, held in grouped if held), *alone)


def _held_by_all(names: tuple[bytes, ...]) -> bytes | None:
    """``_`` when every name holds it (the contract's do), else None."""
    return b"_" if names and all(b"_" in name for name in names) else None
