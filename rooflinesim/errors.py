"""The error a user's input raises: its message is meant for the user as is."""


class InputError(ValueError):
    """A workload the user asked for that makes no sense. The message is meant for the user as is."""
