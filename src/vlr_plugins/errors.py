"""The base of errors a user can act on (bad input, refused request): ``vlr`` reports them
as one ``error:`` line and exits 2, instead of a traceback."""

__all__ = ["UserError"]


class UserError(Exception):
    """Bad input or a refusal from outside; the message says what, where and what to do."""
