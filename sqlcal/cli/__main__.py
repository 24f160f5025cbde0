"""``python -m sqlcal.cli.commands``: the ``sqlcal`` command."""

import sys

from sqlcal.cli.commands import main

sys.exit(main())
