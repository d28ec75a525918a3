"""The one error type a user sees: its message is printed as a single line, exit code 2."""


class AutotuneError(Exception):
    """A problem with the user's input or environment, phrased for the user."""
