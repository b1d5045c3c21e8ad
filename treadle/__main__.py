"""``python -m treadle ARGS`` is the ``treadle`` command."""

from treadle.cli.exits import command, run_and_exit

if __name__ == "__main__":
    run_and_exit(command("treadle.cli.main"))
