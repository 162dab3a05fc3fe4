"""Discovery: catalogs and the pass that refreshes ``tables`` with events."""
