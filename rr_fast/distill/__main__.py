"""``python -m rr_fast.distill``: the distill command (``rr_fast.distill.command``), in a process that answers Ctrl-C,
SIGTERM and SIGHUP in one line from its start (``rr_fast.interrupts``)."""

from rr_fast.interrupts import run_command_process

if __name__ == "__main__":  # importing it (a tool that imports every module) runs nothing
    run_command_process("rr_fast.distill.command")
