"""The service runtime: one lifespan per process, consumers, probes."""
