"""The deletion ledger: expiry that records its files first, orphans quarantined and restored."""
