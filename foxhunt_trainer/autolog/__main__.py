"""`python -m foxhunt_trainer.autolog <command...>`: `foxhunt-run` without the console script."""

import sys

from foxhunt_trainer.autolog.launch import main

sys.exit(main())
