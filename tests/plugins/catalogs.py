"""pytest fixtures: catalogs (session-scoped real components)."""
