"""Task categories (paper 004, Muthuvelu et al.): tasks sorted by what they need
(``sort``), deployment metrics per (category, type) (``metrics``), the batch-resizing
policies that size a task group (``policies``), and two planners of (category, type)
counts under a budget and a deadline: ours, a MILP (``milp``), and the paper's genetic
algorithm as the baseline (``ga``); the LP sharing each category's tasks among types for
the least makespan (``share``). Pure: no clock, no I/O."""
