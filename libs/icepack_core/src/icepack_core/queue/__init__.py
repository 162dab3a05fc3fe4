"""The queue machinery: events, work items, jobs, locks and leases."""
