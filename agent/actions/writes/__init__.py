"""The cluster writer by topic (see agent.actions.writer, which assembles them into one ClusterWriter)."""
