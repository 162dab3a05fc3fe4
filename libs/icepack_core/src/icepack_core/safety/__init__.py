"""Safety: the admission choke point, maintenance holds and job evidence."""
