"""`warn_once`: a warning a training loop gives once per process, not every step (torch arguments tg
accepts but has no use for, work done twice)."""
from __future__ import annotations

import warnings

_WARNED: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """Warn with `message` the first time `key` is seen in this process; the warning points at the
    caller's caller (the user's line that passed the argument).

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as seen:
    ...     warnings.simplefilter("always")
    ...     for _ in range(3):
    ...         warn_once("doc-example", "[nn] this argument has no effect")
    >>> len(seen)
    1
    """
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, stacklevel=3)
