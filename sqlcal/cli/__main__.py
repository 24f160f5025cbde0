"""``python -m sqlcal.cli``: the ``sqlcal`` command."""

import sys

from sqlcal.cli.commands import main

sys.exit(main())
