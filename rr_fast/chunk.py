"""``python -m rr_fast.chunk FILE``: the chunk command (``rr_fast.cli``).

This file exists for ``python -m``; code imports ``rr_fast.cli``. A tool that imports it anyway (one that imports
every submodule) leaves ``rr_fast.chunk`` the function: the package refuses to have it replaced by this module
(``rr_fast._Package``), which stays reachable as ``sys.modules["rr_fast.chunk"]``.
"""

from rr_fast.interrupts import run_command_process

if __name__ == "__main__":
    run_command_process("rr_fast.cli")
