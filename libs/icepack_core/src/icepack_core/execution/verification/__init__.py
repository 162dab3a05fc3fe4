"""Proving a rewrite lost nothing, at the cost of what changed."""
