"""Errors of the distributed layer."""


class DistributedError(RuntimeError):
    """A peer died, aborted, timed out or disagreed about a collective. Raised on every rank."""
