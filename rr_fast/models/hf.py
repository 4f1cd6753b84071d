"""Quiet Hugging Face libraries: transformers' loading without its progress bars and advice, and whatever a library
prints kept off stderr where a caller asked for quiet. stderr is for rr-fast's own messages.

The bottom layer: it imports nothing of rr_fast, and transformers only when a helper runs.
"""

from __future__ import annotations

import os
from contextlib import contextmanager, redirect_stderr, redirect_stdout


@contextmanager
def quiet_transformers():
    """Silence transformers' progress bars and advice while loading: stderr is for our own messages."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()


@contextmanager
def silenced(quiet: bool):
    """With quiet, nothing printed inside (transformers' tqdm bars ignore its verbosity) reaches stdout or stderr."""
    if not quiet:
        yield
        return
    with open(os.devnull, "w") as sink, redirect_stderr(sink), redirect_stdout(sink):
        yield
