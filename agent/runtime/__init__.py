"""The running agent's process: the wiring and the process's own edges.

- :mod:`agent.runtime.app`: the wiring (the ``run`` subcommand): settings, sources, engine, sinks, leader and
  server put together in one root TaskGroup. It is the only module here above the engine (.importlinter).
- :mod:`agent.runtime.leader`: leader election on a ``coordination.k8s.io/v1`` Lease;
- :mod:`agent.runtime.server`: the HTTP server (health, readiness, metrics);
- :mod:`agent.runtime.logs`: structlog set-up;
- :mod:`agent.runtime.clock`: the system clock behind the :class:`agent.core.clock.Clock` port.

The last four are edges (the engine's layer may use them, they use nothing above the core).
"""
