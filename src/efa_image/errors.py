"""The one exception type the CLI turns into a single clear line."""


class EfaImageError(Exception):
    """A failure the user can act on; the message says what to do."""
