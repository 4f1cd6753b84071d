"""The exception types meant for users: the CLI prints their message as a single line."""

from typing import Any

SHOWN = 20  # characters of a value that a message shows


class RRFastError(Exception):
    """Bad input, an unknown model, or limits that cannot work; the message says what to do."""


class UsageError(RRFastError):
    """An option or option combination that cannot work (the CLI exits 2, like argparse's own errors)."""


def first_line(error: BaseException) -> str:
    """A library's error as one line of ours: its message's first line, or its type where it has none."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def shown(value: Any) -> str:
    """A value as a message shows it: its repr, cut to ``SHOWN`` characters, and a list or mapping by its kind alone,
    so that a value from a file (a 300-digit number, a megabyte string, lists nested a thousand deep) cannot fill the
    line."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    try:
        text = repr(value)
    except ValueError:  # an integer past Python's digits limit
        return f"a {type(value).__name__}"
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."
