"""The run's parts: its one state model (``state``), memory, the progress tracker, reflection,
approvals, client queries, waits, the toolbox, typed answers, outages, what it publishes and
shows (``publishing``, ``status``), the hand-over, threads, the cost cap, recovery and planning's
pure decisions. Each imports only the messages below it and its siblings, without a circle."""
