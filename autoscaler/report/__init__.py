"""The cost report of a run: ``report.json`` for programs, ``report.md`` for people, and
the plots (``gantt.png``, ``spend.png``; ``plan``'s ``frontier.png``).

``records`` holds the typed report and its JSON Schema, ``build`` makes it from a run's
state, ``attribution`` shares the machines' cost among a deadline run's jobs,
``markdown`` writes it for people, ``format`` writes its numbers, ``files`` puts it in
the run directory, ``plots`` draws it and ``labels`` keeps the plots' labels apart.
"""
