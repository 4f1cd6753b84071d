"""``python -m rr_fast.corpus``: the corpus command (``rr_fast.corpus.command``)."""

import sys

from rr_fast.corpus.command import main

sys.exit(main())
