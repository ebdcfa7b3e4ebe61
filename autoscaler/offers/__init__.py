"""Offer-based scheduling of a deadline-constrained bag across providers (paper 003,
Netto and Buyya): the composition policies, an emulated cluster that makes offers from
its own earliest-deadline-first queue, and a cloud's offers from its boot time, limits
and prices. Pure: no clock, sleep or I/O; everything takes ``now``.
"""
