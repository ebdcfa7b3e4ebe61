"""Deadline mode (paper 002): the models, the deadline controller, reassignment."""
