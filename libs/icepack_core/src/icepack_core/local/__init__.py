"""Running Icepack on one machine: local Postgres, ``icepack up``/``demo``, the demo lake."""
