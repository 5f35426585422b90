"""Bounded body reading (httpx/bounded.py; parse_json in client/limits.py) against brute-force
oracles: decoding in bounded steps gives exactly what decoding at once gives, a body is refused
exactly when its decoded size passes the cap, and the nesting depth found without parsing is the
parsed value's depth, for any bytes (a brute-force scanner), in time linear in the body: an
adversarial body (issue 38, H1) is scanned under a generous deadline."""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from datetime import timedelta
from typing import Any

import httpx
from hypothesis import example, given, settings
from hypothesis import strategies as st

from invalidation_contracts.client import Limits
from invalidation_contracts.client.limits import json_depth, parse_json
from invalidation_contracts.httpx.bounded import BoundedBody

LIMITS = Limits(max_decoding_ratio=1 << 30)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab"\\[]{}\u00e9 '),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=30,
)


def encode(data: bytes, coding: str) -> bytes:
    if coding == "gzip":
        return gzip.compress(data)
    if coding == "deflate":
        return zlib.compress(data)
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)  # raw deflate, also "deflate"
    return raw.compress(data) + raw.flush()


def encoded(body: bytes, codings: list[str]) -> bytes:
    for coding in codings:
        body = encode(body, coding)
    return body


def read(
    body: bytes, codings: list[str], cap: int, cuts: list[int], replay: bool = True
) -> BoundedBody:
    body = encoded(body, codings)
    names = ", ".join("deflate" if c == "raw" else c for c in reversed(codings))
    headers = httpx.Headers({"content-encoding": names} if names else {})
    reading = BoundedBody.of(headers, cap, LIMITS, "max_body_bytes", replay=replay)
    points = sorted({0, len(body), *(c % (len(body) + 1) for c in cuts)})
    for start, end in zip(points, points[1:], strict=False):
        if not reading.feed(body[start:end]):
            break
    return reading


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    return 0


codings = st.lists(st.sampled_from(["gzip", "deflate", "raw"]), max_size=3)


@settings(max_examples=150, deadline=None)
@given(json_values, codings, st.lists(st.integers(min_value=0), max_size=6), st.booleans())
def test_a_body_within_the_cap_decodes_to_exactly_its_bytes(value, chain, cuts, replay):
    body = json.dumps(value).encode()

    assert read(body, chain, 1 << 20, cuts, replay).finish() == body


@settings(max_examples=100, deadline=None)
@given(json_values, st.lists(st.integers(min_value=0), max_size=6), st.booleans())
def test_an_unencoded_body_is_held_once_as_the_chunks_it_came_in(value, cuts, replay):
    body = json.dumps(value).encode()
    reading = read(body, [], 1 << 20, cuts, replay)

    assert b"".join(reading.raw) == body and reading.decoded == b""
    assert reading.size == len(body)


@settings(max_examples=100, deadline=None)
@given(json_values, codings.filter(bool), st.lists(st.integers(min_value=0), max_size=6))
def test_an_encoded_body_read_for_the_memory_alone_keeps_no_raw_chunk(value, chain, cuts):
    body = json.dumps(value).encode()
    reading = read(body, chain, 1 << 20, cuts, replay=False)

    assert reading.finish() == body and reading.raw == []


@settings(max_examples=150, deadline=None)
@given(json_values, codings, st.integers(min_value=1, max_value=200), st.lists(st.integers()))
def test_a_body_is_refused_exactly_when_its_decoded_size_passes_the_cap(value, chain, cap, cuts):
    body = json.dumps(value).encode()
    reading = read(body, chain, cap, cuts)

    content = reading.finish()
    over = len(body) > cap or len(encoded(body, chain)) > cap  # decoded, or as sent
    assert content == (None if over else body)
    assert (reading.refusal is not None) == over
    if over:
        assert reading.refusal.bound == "max_body_bytes" and reading.size > cap


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_the_depth_found_without_parsing_is_the_parsed_depth(value):
    assert json_depth(json.dumps(value).encode()) == depth(value)


def scanned_depth(content: bytes) -> int:
    """The oracle: one byte at a time, a string skipped to its closing quote or to the end."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in content:
        if in_string:
            if escaped:
                escaped = False
            elif byte == ord("\\"):
                escaped = True
            elif byte == ord('"'):
                in_string = False
        elif byte == ord('"'):
            in_string = True
        elif byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth -= 1
    return deepest


hostile_bytes = st.binary(max_size=60) | st.text(alphabet='"\\[]{}a', max_size=60).map(str.encode)


@settings(max_examples=300, deadline=None)
@given(hostile_bytes)
def test_the_depth_of_any_bytes_is_what_a_byte_by_byte_scan_finds(content):
    assert json_depth(content) == scanned_depth(content)


def test_the_depth_scan_holds_no_copy_of_a_body_of_many_short_strings():
    keys = [f"r{n:05d}" for n in range(64_000)]  # issue 38, H2: 64 suggestions × 1,000 keys
    body = json.dumps({"tables": [{"keys": keys}]}).encode()
    tracemalloc.start()
    try:
        json_depth(body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert peak < len(body) // 10  # re.sub held a piece per string: 20× the body


@settings(max_examples=25, deadline=timedelta(seconds=2))
@example(motif=b'\\"', tail=b"[" * 129)  # the audit's body: '"' + '\\"' * n + '[' * 129
@example(motif=b'"\\', tail=b"")
@given(st.text(alphabet='"\\[]{}a', min_size=1, max_size=6).map(str.encode), hostile_bytes)
def test_an_adversarial_body_of_64_kib_is_scanned_in_linear_time(motif, tail):
    body = b'"' + motif * (64 * 1024 // len(motif)) + tail  # quadratic before: ~12 s at 64 KiB

    assert json_depth(body) == scanned_depth(body)
    assert parse_json(body, 128)[1] is None or scanned_depth(body) > 128


@given(json_values, st.integers(min_value=0, max_value=6))
def test_parse_json_refuses_exactly_the_bodies_nested_deeper_than_the_bound(value, bound):
    parsed, refusal = parse_json(json.dumps(value).encode(), bound)

    if depth(value) > bound:
        assert parsed is None and refusal is not None and refusal.actual == depth(value)
    else:
        assert parsed == value and refusal is None


def test_a_decoding_step_never_produces_more_than_64_kib_from_a_bomb():
    body = gzip.compress(b"0" * (32 << 20))
    reading = BoundedBody.of(
        httpx.Headers({"content-encoding": "gzip"}), 1 << 20, LIMITS, "max_body_bytes"
    )

    assert not reading.feed(body)
    assert reading.refusal is not None and reading.size <= (1 << 20) + 64 * 1024
