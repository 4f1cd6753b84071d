"""The one exception type meant for users: the CLI prints its message as a single line."""


class RRFastError(Exception):
    """Bad input, an unknown model, or limits that cannot work; the message says what to do."""
