"""The exception types meant for users: the CLI prints their message as a single line."""


class RRFastError(Exception):
    """Bad input, an unknown model, or limits that cannot work; the message says what to do."""


class UsageError(RRFastError):
    """An option or option combination that cannot work (the CLI exits 2, like argparse's own errors)."""


def first_line(error: BaseException) -> str:
    """A library's error as one line of ours: its message's first line, or its type where it has none."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
