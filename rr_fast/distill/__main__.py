"""``python -m rr_fast.distill``: the distill command (``rr_fast.distill.command``), in a process that answers Ctrl-C
and SIGTERM in one line from its start (``rr_fast.interrupts``)."""

from rr_fast.interrupts import run_command_process

run_command_process("rr_fast.distill.command")
