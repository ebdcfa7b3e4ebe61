"""Budget mode (paper 000, slides 001): the budget planner and controller, the frontier.
What the runs teach of runtimes is ``autoscaler.learn``. Its modules, each importing
only those above it:

* ``problem``: the planner's records; ``per_second``: the horizon search under
  per-second billing; ``planner``: the fixed-ATU MILP, the entry points, the
  clairvoyant bound; ``minimum``: the least budget that finishes a bag.
* ``outlook``: N_e, N_p and the forecast of a mix's cost and end.
* The controller, by what it decides: ``settings``; ``fleet`` (launch and mark towards
  the target); ``sampling`` (plain and compact); ``runtimes`` (T_i, N_e, the reserve);
  ``plans`` (a mix for the money, and its prediction); ``monitor`` (N_e against N_p,
  re-planning, the shortfall); ``boundaries`` (money at the end of a paid unit);
  ``tail`` (tail replication); ``controller`` (``Controller.step`` calling them).
* Categories (paper 004): ``categories`` (which tasks a machine takes);
  ``category_means`` (a type's mean as the tasks a mix gives it); ``category_mix`` (the
  planner's mix and those means found together).
* ``frontier``: the budget options ``autoscaler plan`` offers.
"""
