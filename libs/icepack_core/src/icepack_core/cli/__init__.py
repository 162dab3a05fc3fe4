"""The ``icepack`` command line."""
