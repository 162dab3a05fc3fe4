"""Streaming benchmark (issue #27): Icepack on defaults beside writers committing every second."""
