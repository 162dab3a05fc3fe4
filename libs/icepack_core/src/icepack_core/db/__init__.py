"""Icepack's Postgres: the pool, migrations, named queries and the schema."""
