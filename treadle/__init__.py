"""What ``worker.py`` and ``starter.py`` share outside the worker: the Temporal connection,
the dev-server launcher, the job schedule sync, the ping service, the scripted model server
(demo and tests) and the command-line sub-commands (``treadle.cli``).

Never imported by ``workflows/`` or ``activities/``; never imports ``worker.py`` or
``starter.py`` (tests/architecture/test_architecture.py checks both)."""
