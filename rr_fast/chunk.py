"""``python -m rr_fast.chunk FILE``: the chunk command (``rr_fast.cli``).

This file exists for ``python -m`` alone: importing ``rr_fast.chunk`` as a module would replace the ``rr_fast.chunk()``
function on the package, so code imports ``rr_fast.cli``.
"""

from rr_fast.interrupts import run_command_process

if __name__ == "__main__":
    run_command_process("rr_fast.cli")
