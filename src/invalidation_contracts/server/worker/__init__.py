"""The framework-free worker: one domain's contract in one process, following the shared history.

``contract.ContractWorker`` is what every transport answers from (the HTTP routers add themselves
in ``server.http.ContractService``; the MCP server serves it as it is); ``runtime`` opens the
registry's stores and keeps the registry at the shared head; ``follower`` is the thread that
follows the history other workers write (polling, or woken by the store's notifications).
"""
