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
