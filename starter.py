"""The command line from a checkout: ``python starter.py ARGS`` is ``treadle ARGS``
(``treadle --help`` lists the commands; the code is ``treadle.cli.main``)."""

from treadle.cli.exits import command, run_and_exit

if __name__ == "__main__":
    run_and_exit(command("treadle.cli.main"))
