"""The engine: small parts with one job each, between the state cache and the edges.

- :mod:`~agent.engine.detecting`: state changes through the detectors, faults onto the queue;
- :mod:`~agent.engine.deciding`: a fault in, :class:`~agent.engine.plan.Plan` s out (plain data);
- :mod:`~agent.engine.acting`: plans and incidents' restarts carried out through the writer port;
- :mod:`~agent.engine.quarantining`, :mod:`~agent.engine.breaker`, :mod:`~agent.engine.ticking`,
  :mod:`~agent.engine.term`: node quarantine, the circuit breaker, incidents over time, the leadership term;
- :mod:`~agent.engine.ports`: the interfaces it talks through (event sink, metrics, cluster writer; the clock
  is agent.core.clock's); :mod:`~agent.engine.recovery` puts the parts together.
"""
