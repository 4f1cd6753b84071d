"""``python -m rr_fast FILE``: the same command line as ``python -m rr_fast.chunk FILE`` (see rr_fast.cli)."""

from rr_fast.cli import entry

if __name__ == "__main__":
    entry()
