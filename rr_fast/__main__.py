"""``python -m rr_fast``: the ``rr-fast`` command (``rr_fast.cli.entry``): ``FILE`` to chunk one, ``corpus ...`` or
``distill ...`` for the other commands."""

from rr_fast.cli import entry

if __name__ == "__main__":
    entry()
