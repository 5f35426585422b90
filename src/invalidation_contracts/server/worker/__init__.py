"""The framework-free worker: one domain's contract in one process, following the shared history.

``contract.ContractWorker`` is what every transport answers from (the HTTP routers add themselves
in ``server.http.ContractService``; the MCP server serves it as it is); ``runtime`` opens the
registry's stores and keeps the registry at the shared head; ``follower`` is the thread that
follows the history other workers write, with its rooms beside it: ``wakeups`` (what wakes it:
``NOTIFY``, inotify, a capture's lead, or polling), ``health`` (whether it can vouch for its
state), ``watchdog`` (breaks a call stalled on a silent link). ``timing`` holds their defaults and
checks, pure, so a worker's configuration (``server.config``) loads none of the rest.
"""
