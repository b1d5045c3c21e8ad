"""A worker from a checkout: ``python worker.py ARGS`` is ``treadle worker ARGS``
(``treadle worker --help``; the code is ``treadle.cli.worker``, built on ``TreadlePlugin``)."""

from treadle.cli.exits import command, run_and_exit

if __name__ == "__main__":
    run_and_exit(command("treadle.cli.worker"))
