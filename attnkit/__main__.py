"""``python -m attnkit`` (also what ``torchrun -m attnkit`` runs)."""

import sys

from attnkit.cli.main import main

sys.exit(main())
