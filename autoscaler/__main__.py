"""``python -m autoscaler``: the command line, as the ``autoscaler`` script."""

from autoscaler.cli.main import main

main()
