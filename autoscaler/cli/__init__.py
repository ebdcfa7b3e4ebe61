"""The ``autoscaler`` command line."""
