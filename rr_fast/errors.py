"""The exception types meant for users: the CLI prints their message as a single line."""


class RRFastError(Exception):
    """Bad input, an unknown model, or limits that cannot work; the message says what to do."""


class UsageError(RRFastError):
    """An option or option combination that cannot work (the CLI exits 2, like argparse's own errors)."""
