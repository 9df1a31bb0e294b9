"""Memory budgets: footprint prediction, the planner, a GPU driver's memory."""
