"""pytest fixtures: spark (session-scoped real components)."""
