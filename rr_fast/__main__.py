"""``python -m rr_fast`` and the ``rr-fast`` script: ``FILE`` to chunk one (``rr_fast.cli``), ``corpus ...`` or
``distill ...`` for the other commands. Light on purpose: the command's module is imported once the process answers
Ctrl-C, SIGTERM and SIGHUP in one line (``rr_fast.interrupts``)."""

import sys
from pathlib import Path
from typing import NoReturn

from rr_fast.interrupts import run_command_process

COMMANDS = {"corpus": "rr_fast.corpus.command", "distill": "rr_fast.distill.command"}


def entry() -> NoReturn:
    argv = sys.argv[1:]
    if argv and argv[0] in COMMANDS and not Path(argv[0]).exists():  # a file named "corpus" is still chunked
        run_command_process(COMMANDS[argv[0]], argv[1:])
    run_command_process("rr_fast.cli", argv)


if __name__ == "__main__":
    entry()
