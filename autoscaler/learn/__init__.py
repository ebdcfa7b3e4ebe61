"""Learning task runtimes (paper 000 §2.1, slides 001): what the runs of a bag teach,
shared by both policies and kept in a run's state. Pure statistics: below the core, it
imports nothing else of ours.

* ``stats``: sample sizes, ``RuntimeStats`` (what is seen per type), ``tasks_within``;
* ``survival``: Kaplan–Meier T_i with its tails and interval;
* ``ragged``: when the last task of a run ends;
* ``affine``: compact sampling's map between two types' runtimes.
"""
