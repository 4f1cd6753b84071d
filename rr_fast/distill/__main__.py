"""``python -m rr_fast.distill``: the distill command (``rr_fast.distill.command``)."""

import sys

from rr_fast.distill.command import main

sys.exit(main())
