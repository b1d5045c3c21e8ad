"""The command line from a checkout: ``python starter.py ARGS`` is ``treadle ARGS``
(``treadle --help`` lists the commands; the code is ``treadle.cli.main``)."""

from treadle.cli.exits import run_and_exit
from treadle.cli.main import main

if __name__ == "__main__":
    run_and_exit(main)
