"""Errors of the distributed layer."""


class DistributedError(RuntimeError):
    """A peer died, aborted, timed out or disagreed about a collective (torch raises RuntimeError or
    DistBackendError there). Raised on every rank, naming the rank at fault; after it, the group is
    failed and every later call on it raises the same error. Under mpi the job ends instead.

    >>> from concurrent.futures import Future
    >>> import tg.distributed as dist
    >>> issubclass(dist.DistributedError, RuntimeError)
    True
    >>> try:
    ...     dist.Work(Future()).wait(timeout=0.01)      # a call that never finishes
    ... except dist.DistributedError as e:
    ...     print(e)
    [distributed] Work.wait timed out after 0.01s
    """


class CollectiveTimeout(DistributedError):
    """A wait inside a collective or a point-to-point call ran past TG_DIST_TIMEOUT. The peer it waited on
    may be waiting too: the group asks every rank where it waits before it fails (group.py), so the
    error that reaches the caller names the rank that is stuck."""


def ranks_phrase(ranks: list[int]) -> str:
    """'rank 3' or 'ranks 1, 3', for messages."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
