"""Inspection: a table's ``TableStatus``, its health, and their persistence."""
