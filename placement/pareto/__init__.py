"""WG_PF: the cost/balance Pareto front and the rule that picks one plan."""
