"""The soak: a seeded random schedule of faults and disruptions run on the testbed while a checker asserts the
agent's invariants (issue 16, "The proof").

- :mod:`testbed.soak.schedule`: the schedule (pure: a seed and a length in, steps out; JSON for replay);
- :mod:`testbed.soak.checks`: the invariants (pure: what was observed in, violations out);
- :mod:`testbed.soak.shrink`: delta debugging of a failing schedule (pure but for the predicate it calls);
- :mod:`testbed.soak.runner`: runs one schedule on a testbed with two agents and collects the observations;
- ``python -m testbed.soak``: the command behind ``make soak``.
"""
