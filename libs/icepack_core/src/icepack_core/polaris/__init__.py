"""Apache Polaris as a policy source: its ``system.*`` policies mapped onto Icepack's."""
