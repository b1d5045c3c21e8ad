"""What ``treadle worker`` and ``treadle`` share outside the worker: the Temporal connection,
the dev-server launcher, the job schedule sync, the ping service, the scripted model server
(demo and tests) and the command-line sub-commands (``treadle.cli``).

Never imported by ``workflows/`` or ``activities/``; never imports ``treadle worker`` or
``treadle`` (tests/architecture/test_architecture.py checks both)."""
