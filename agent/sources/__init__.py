"""The watched collections turned into slim records: converters per source, the state cache, the watchers.

- :mod:`agent.sources.catalog`: every watched source declared once (API, converter, signal time, detector label);
- :mod:`agent.sources.common`, ``configmaps``, ``jobs``, ``leases``, ``nodes``, ``podgroups``, ``pods``: one
  converter per kind of object;
- :mod:`agent.sources.state`: the cluster state cache the watchers keep (and its indexes);
- :mod:`agent.sources.watchers`: which collections to watch and the wiring of each watcher to the state.
"""
