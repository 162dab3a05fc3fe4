"""Planning: recommendations from status and policy, the planner, simulation."""
