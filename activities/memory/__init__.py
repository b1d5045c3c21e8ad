"""Long-term memory across threads: the namespaces' entity workflows, written and read through
the typed client API (``store``), and the ``remember``, ``recall`` and ``forget`` tools a run
with ``config.memory`` offers (``tools``)."""
