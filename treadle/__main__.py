"""``python -m treadle ARGS`` is the ``treadle`` command."""

from treadle.cli.exits import run_and_exit
from treadle.cli.main import main

if __name__ == "__main__":
    run_and_exit(main)
