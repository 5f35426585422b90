"""uvicorn's worker supervisor, with a worker that dies seen at once.

uvicorn's ``Multiprocess`` checks each worker every 0.5 s: it writes a ping on a pipe and waits
up to ``timeout_worker_healthcheck`` for the answer. The supervisor keeps its own copy of the
worker's end of that pipe, so a worker that dies between the ping and its answer never closes the
pipe: the supervisor waits out the whole timeout (60 s here, ``serve.WORKER_START_TIMEOUT_S``)
before it starts a replacement, and checks no other worker meanwhile. ``Supervisor`` closes its
copy once the worker has started (the worker holds its own), so a dead worker's pipe reads as
closed and the next check replaces it. A worker that hangs alive still has the whole timeout.
"""

from __future__ import annotations

import threading

from uvicorn.supervisors import Multiprocess

#: How often the supervisor looks for workers started since its last look.
LOOK_INTERVAL_S = 0.05


class Supervisor(Multiprocess):
    """``Multiprocess`` whose health checks see a dead worker's pipe closed."""

    def run(self) -> None:
        releaser = threading.Thread(
            target=self._release_worker_ends, name="invalidation-contracts-pipes", daemon=True
        )
        releaser.start()
        try:
            super().run()
        finally:
            self.should_exit.set()
            releaser.join()

    def _release_worker_ends(self) -> None:
        """Close this process's copy of each started worker's end of its health-check pipe."""
        while not self.should_exit.wait(LOOK_INTERVAL_S):
            for worker in list(self.processes):
                # listed only once started (the pid is a guard): the worker has its own copy
                if not worker.child_conn.closed and worker.process.pid is not None:
                    worker.child_conn.close()
