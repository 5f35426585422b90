"""A stdio relay that interprets nothing: each line from the host is written to the server it
spawns, and each line back to the host, as bytes. ``mcp_proxy`` times it as the floor of one more
process on the path (what any proxy pays before doing anything).

usage: python -m benchmarks.relay COMMAND [ARG...]
"""

from __future__ import annotations

import subprocess
import sys
import threading


def main(argv: list[str]) -> int:
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    upstream, downstream = child.stdin, child.stdout

    def back() -> None:
        for line in downstream:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()

    threading.Thread(target=back, daemon=True).start()
    for line in sys.stdin.buffer:
        upstream.write(line)
        upstream.flush()
    upstream.close()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
