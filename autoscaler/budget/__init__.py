"""Budget mode (paper 000, slides 001): estimation, the budget planner and controller,
the frontier."""
