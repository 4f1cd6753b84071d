"""Python's cyclic garbage collector during a command's start-up: off until the model is loaded.

A command imports torch and builds its model before it reads a token: about a million objects that live as long as
the process. The collector traverses every tracked object each time their number has grown by a quarter, so it goes
over them two or three times while they are made (about 0.1 s of the chunk command's 1.8-second cold start on a
2-core CPU) and frees none of them. ``run_command_process`` pauses it as the command's process starts; the command
resumes it once its start-up is over, with everything made so far frozen (``gc.freeze``: later collections skip those
objects), so a long run (a corpus) still collects the garbage it makes. A process that loads a model resumes it once
the model is loaded (the chunk and distill commands, a corpus worker); one that loads none, once what it starts is
running (the corpus command's parent of several workers, its Ray driver). A program that calls a command's ``main`` in
its own process is left alone: only a pause made here is resumed here.
"""

from __future__ import annotations

import gc

_paused = False


def pause_for_start_up() -> None:
    """The collector off, where it was on."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume_after_start_up() -> None:
    """The collector on again, past the start-up's objects (frozen); nothing unless ``pause_for_start_up`` paused it."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
