"""How one fix memory lives in a store that threads, processes and machines share.

The floor under the memory's semantics (admission, invalidation, strategies, fold, entries): the
store interface every adapter implements (``store``), store I/O as data (``steps``), how a memory
lies in a store (``layout``: namespaces, generation, journal), this process's copies of origins
(``replica``, ``index``), one call's view and record (``overlay``, ``ledger``), large evictions
recorded once (``moves``) and the fair turn of a writer that keeps losing races (``turn``).
Nothing here decides what a fix means: it imports only the memory's data (entries, events, state,
stats, limits, retention, lessons), never a room that decides (tests/test_layering.py). The call
that joins both floors is ``client.transaction``.
"""
