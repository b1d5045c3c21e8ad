"""Run the scripted model server: ``python -m treadle.scripted_model --script FILE``."""

import sys

from treadle.scripted_model.cli import main

sys.exit(main())
