"""``python -m hista.cli`` (as ``accelerate launch -m hista.cli`` runs it): the ``hista`` command."""

import sys

from .main import main

sys.exit(main())
