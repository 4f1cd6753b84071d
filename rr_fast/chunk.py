"""``python -m rr_fast.chunk FILE``: the command-line entry point (the logic lives in ``rr_fast.cli``).

Import ``rr_fast.cli`` rather than this module: importing ``rr_fast.chunk`` as a module would replace the
``rr_fast.chunk()`` function on the package.
"""

from rr_fast.cli import entry

if __name__ == "__main__":
    entry()
