"""Execution: running one job's actions on Spark and proving they lost nothing."""
