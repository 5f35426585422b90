"""The child process that hosts llama.cpp's HTTP server (``xllamacpp``) for a local planner.

Started by :class:`.server.LlamaServer` as ``python .../serve.py CONFIG_JSON``: a script, so the
child imports xllamacpp and nothing of this package. It prints one JSON line on stdout,
``{"ready": URL}`` once the model is loaded and the port bound (or ``{"error": ...}``), then
serves until its stdin closes: the parent closes it to stop the server, and the operating system
closes it when the parent dies, so no server outlives the process that started it (it finishes
the step in flight first). llama.cpp's log goes to stderr.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def serve(config: dict[str, Any]) -> int:
    """Start the server ``config`` describes, report on stdout, block until stdin closes."""
    import xllamacpp  # type: ignore[import-untyped]

    params = xllamacpp.CommonParams()
    params.model.path = config["model_path"]
    params.model_alias = {config["alias"]}
    params.hostnames = ["127.0.0.1"]
    params.port = config["port"]
    params.n_parallel = config["parallel"]
    params.n_ctx = config["context"] * config["parallel"]
    params.cpuparams.n_threads = config["threads"]
    params.cpuparams_batch.n_threads = config["threads"]
    try:
        server = xllamacpp.Server(params)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which reads the log
        print(json.dumps({"error": str(exc)}), flush=True)
        return 3
    print(json.dumps({"ready": server.listening_address}), flush=True)
    sys.stdin.buffer.read()
    del server
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a child process
    sys.exit(serve(json.loads(sys.argv[1])))
