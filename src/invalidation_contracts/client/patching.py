"""Client apply mode: a cached fix's JSON Patch (RFC 6902) applied to the planned request.

The patch is applied all-or-nothing to a copy (the input is never mutated), and only when every
path it writes is one the origin publishes as patchable (the path itself or below it). Only
``add``, ``replace``, ``remove`` and ``test`` are allowed: ``copy`` and ``move`` read a value from
another field, so what the patch writes could differ from the parameters the planner was shown.
``test`` operations are preconditions: they may read any path, and a failed test means the fix
does not apply to this request (the request comes back unchanged), not that the fix is bad. A
patch that writes outside the patchable paths, or copies or moves, is refused; the memory
quarantines its entry.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

import jsonpatch
import jsonpointer
from pydantic import ValidationError

from ..protocol.models import PatchOperation, field_pointer

#: The JSON Patch operations a cached fix may use.
ALLOWED_OPS = frozenset({"add", "replace", "remove", "test"})


class ApplyMode(str, Enum):  # noqa: UP042 - keeps str() and f-string output as is
    """Who applies a cached fix to the request."""

    PLANNER = "planner"
    """The model applies it, from the memory block (as in the paper)."""
    CLIENT = "client"
    """The client applies the cached JSON Patch to the planned request, on patchable paths only."""

    @classmethod
    def parse(cls, value: ApplyMode | ApplyModeName) -> ApplyMode:
        """``value`` as an ``ApplyMode``: ``"model"`` is the MCP adapters' spelling of
        ``PLANNER`` (the model applies the fixes it was shown); else ``ValueError``."""
        if value == "model":
            return cls.PLANNER
        try:
            return cls(value)
        except ValueError:
            spellings = ", ".join(repr(name) for name in APPLY_MODE_NAMES)
            raise ValueError(f"apply must be one of {spellings}, not {value!r}") from None


#: How an apply mode may be spelt where it is given as a string.
ApplyModeName = Literal["client", "model", "planner"]
APPLY_MODE_NAMES: tuple[ApplyModeName, ...] = ("client", "model", "planner")


class PatchRefused(ValueError):
    """A patch writes outside the patchable paths, or is not a well-formed patch."""

    def __init__(self, detail: str, paths: Sequence[str] = ()) -> None:
        super().__init__(detail)
        self.paths = tuple(paths)


@dataclass(frozen=True, slots=True)
class PatchResult:
    """The request after a patch: ``applied`` False (with ``reason``) leaves it as it was."""

    request: dict[str, Any]
    applied: bool
    reason: str | None = None


def validate_pointer(path: str) -> str:
    """Check an RFC 6901 JSON Pointer; raise ``ValueError`` if it is not one."""
    try:
        jsonpointer.JsonPointer(path)
    except jsonpointer.JsonPointerException as exc:
        raise ValueError(f"{path!r} is not a JSON Pointer: {exc}") from None
    return path


def as_pointer(path: str) -> str:
    """A JSON Pointer as it is, or a top-level field name as its pointer (``a/b`` → ``/a~1b``)."""
    if path.startswith("/") or path == "":
        return validate_pointer(path)
    return field_pointer(path)


def written_paths(ops: Iterable[PatchOperation]) -> list[str]:
    """The paths a patch writes: every op's ``path`` but a test's, and a move's ``from``."""
    paths = []
    for op in ops:
        if op.op != "test":
            paths.append(op.path)
        if op.op == "move" and op.from_ is not None:
            paths.append(op.from_)
    return paths


def is_patchable(path: str, patchable: Collection[str]) -> bool:
    return any(path == allowed or path.startswith(allowed + "/") for allowed in patchable)


def apply_patch(
    request: Mapping[str, Any],
    patch: Sequence[PatchOperation | Mapping[str, Any]],
    patchable: Collection[str],
) -> PatchResult:
    """Apply ``patch`` to a copy of ``request``; raise ``PatchRefused`` if it writes off-limits."""
    try:
        ops = [
            op if isinstance(op, PatchOperation) else PatchOperation.model_validate(op)
            for op in patch
        ]
    except ValidationError as exc:
        raise PatchRefused(f"not a JSON Patch: {exc.errors()[0]['msg']}") from None
    reading = [f"{op.op} {op.path}" for op in ops if op.op not in ALLOWED_OPS]
    if reading:
        raise PatchRefused(
            f"patch copies or moves values ({', '.join(reading)}); only add, replace, remove "
            "and test are allowed",
            [op.path for op in ops if op.op not in ALLOWED_OPS],
        )
    outside = [path for path in written_paths(ops) if not is_patchable(path, patchable)]
    if outside:
        raise PatchRefused(
            f"patch writes outside the patchable paths: {', '.join(outside)}", outside
        )
    try:
        patched = jsonpatch.apply_patch(dict(request), [_wire(op) for op in ops], in_place=False)
    except jsonpatch.JsonPatchTestFailed as exc:
        return PatchResult(copy.deepcopy(dict(request)), False, f"precondition failed: {exc}")
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        return PatchResult(copy.deepcopy(dict(request)), False, f"does not apply: {exc}")
    return PatchResult(patched, True)


def _wire(op: PatchOperation) -> dict[str, Any]:
    out: dict[str, Any] = {"op": op.op, "path": op.path}
    if op.op in ("add", "replace", "test"):
        out["value"] = op.value
    if op.op in ("move", "copy"):
        out["from"] = op.from_
    return out
