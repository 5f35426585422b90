"""Performance benchmarks of invalidation-contracts (issues 8, 12 and 18): not tests, measurements.

Run them all with ``python -m benchmarks`` from the repository root; the results go to
``benchmarks/RESULTS.md`` with the machine and the command. One module per study: ``wire_cost``,
``provider_load``, ``reload_cost``, ``client_cost``, ``harness_throughput``, ``serve_latency``,
``production``. Every figure reported is a ratio against a baseline measured in the same run,
because the machines are shared and noisy.
"""
