"""Deadline mode (paper 002): the inputs and the instance (instance), models (7) and (10)
(milp, patterns), Algorithms 1–3 (assign), the controller split by what it decides
(controller, jobs, sampling, planning, forecast, watch, ends, withdraw), reassignment."""
