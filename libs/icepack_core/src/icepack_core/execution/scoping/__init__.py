"""Scoping a compaction: partition filters, open partitions, per-transform terms, cluster keys."""
