"""The engine: small parts with one job each, between the state cache and the edges.

- :mod:`~agent.engine.detecting`: state changes through the detectors, faults onto the queue;
- :mod:`~agent.engine.deciding`: a fault in, :class:`~agent.engine.plan.Plan` s out (plain data);
- :mod:`~agent.engine.acting`: plans carried out through the writer port;
- a restart in flight: :mod:`~agent.engine.inflight` owns its state (one object, named operations), and each step
  is a room of its own: :mod:`~agent.engine.claiming` (the job's record: the claim, the incident's writes),
  :mod:`~agent.engine.sending` (the restart sent, ``restarting`` recorded), :mod:`~agent.engine.follow_ups`
  (force or grace deletion after it), :mod:`~agent.engine.resubmitting` (a ``resubmit`` carried out, or finished
  from its record), :mod:`~agent.engine.closing` (an incident's end counted);
- :mod:`~agent.engine.quarantining`, :mod:`~agent.engine.breaker`, :mod:`~agent.engine.ticking`,
  :mod:`~agent.engine.term`: node quarantine, the circuit breaker, incidents over time, the leadership term;
- :mod:`~agent.engine.ports`: the interfaces it talks through (event sink, metrics, cluster writer; the clock
  is agent.core.clock's); :mod:`~agent.engine.recovery` puts the parts together.
"""
