"""The pure core: faults and cluster records, detection, correlation, policy, incidents, guards, quarantine rules.

Plain data in, plain data out. Nothing here does I/O, reads a clock (time is passed in) or imports a client
library or an edge package (agent.kube, agent.sources, agent.sinks, agent.actions); `make lint` holds that with
the import-linter contracts in ``.importlinter`` and the clock rule of tests/tools/test_layering.py.
"""
