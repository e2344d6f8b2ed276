"""The exact optimum: set partitions, node sets, LP bounds, exact fronts."""
