"""``python -m rr_fast FILE``: the same command line as ``python -m rr_fast.chunk FILE`` (see rr_fast.cli)."""

import sys

from rr_fast.cli import main

if __name__ == "__main__":
    sys.exit(main())
