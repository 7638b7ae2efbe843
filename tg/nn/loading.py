"""Loading a state dict into named tensors: every key and shape checked before anything is written, one
error listing all the problems (`StateDictError`), what strict=False left out (`LoadResult`).
`tg.nn.state.load_state_dict` (any object) and `Module.load_state_dict` both load through `load_into`."""
from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from tg.core.tensor import Tensor


class LoadResult(NamedTuple):
    """What load_state_dict did not match: unpacks as (missing, unexpected), like torch's.

        >>> import numpy as np
        >>> from tg import Tensor
        >>> result = load_into({"w": Tensor.zeros(2)}, {"w": np.ones(2), "v": np.ones(1)}, strict=False)
        >>> result.missing_keys, result.unexpected_keys
        ([], ['v'])
    """
    missing_keys: list[str]
    unexpected_keys: list[str]


class StateDictError(ValueError):
    """A state dict that does not fit the model (a ValueError); the problems are also kept as attributes.

        >>> import numpy as np
        >>> from tg import Tensor
        >>> try:
        ...     load_into({"w": Tensor.zeros(2)}, {"w": np.zeros(3), "b": np.zeros(1)})
        ... except StateDictError as e:
        ...     print(e.missing_keys, e.unexpected_keys, e.mismatched_shapes)
        ...     print(str(e).splitlines()[0])
        [] ['b'] [('w', (2,), (3,))]
        [nn] load_state_dict: the state dict does not fit the model (1 unexpected key, 1 shape mismatch)
    """

    def __init__(self, missing: list[str], unexpected: list[str],
                 mismatched: list[tuple[str, tuple[int, ...], tuple[int, ...]]]):
        self.missing_keys, self.unexpected_keys, self.mismatched_shapes = missing, unexpected, mismatched
        super().__init__(_describe_mismatch(missing, unexpected, mismatched))


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else ('es' if what.endswith('h') else 's')}"


def _shown(names: list[str], limit: int = 12) -> str:
    more = f", ... ({len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _prefix_hint(missing: list[str], unexpected: list[str]) -> str:
    """Spot the common case of every key being off by one prefix (`module.`, `model.`)."""
    for longer, shorter, side in ((unexpected, missing, "state dict"), (missing, unexpected, "model")):
        if not longer or not shorter:
            continue
        short_set = set(shorter)
        candidates = {longer[0][: len(longer[0]) - len(k)] for k in shorter
                      if longer[0].endswith("." + k)}
        for p in sorted(candidates, key=len):
            if all(k.startswith(p) and k[len(p):] in short_set for k in longer):
                if side == "state dict":
                    return (f"every unexpected key is a model key with the extra prefix {p!r}: load "
                            f"{{k.removeprefix({p!r}): v for k, v in state_dict.items()}}")
                return (f"every missing key is a state-dict key under the prefix {p!r}: load "
                        f"{{{p!r} + k: v for k, v in state_dict.items()}}")
    return ""


def _describe_mismatch(missing: list[str], unexpected: list[str],
                       mismatched: list[tuple[str, tuple[int, ...], tuple[int, ...]]]) -> str:
    problems = ((missing, "missing key"), (unexpected, "unexpected key"), (mismatched, "shape mismatch"))
    counts = [_count(len(names), what) for names, what in problems if names]
    lines = [f"[nn] load_state_dict: the state dict does not fit the model ({', '.join(counts)})"]
    if missing:
        lines.append(f"  missing (in the model, not in the state dict): {_shown(missing)}")
    if unexpected:
        lines.append(f"  unexpected (in the state dict, not in the model): {_shown(unexpected)}")
    for name, want, got in mismatched:
        lines.append(f"  shape mismatch for {name}: the model has {want}, the state dict has {got}")
    hint = _prefix_hint(missing, unexpected) or (
        "compare the names with list(get_state_dict(model)); strict=False loads the matching keys "
        "and returns the missing and unexpected ones")
    if mismatched:
        hint += "; a shape mismatch is an error even with strict=False: drop or reshape those entries"
    lines.append(f"hint: {hint}")
    return "\n".join(lines)


def load_into(targets: Mapping[str, Tensor], state_dict: Mapping[str, Tensor | np.ndarray],
              strict: bool = True) -> LoadResult:
    """Copy state_dict's values into the tensors `targets` names (a model's state dict), in place and
    cast to each tensor's dtype; see tg.nn.state.load_state_dict for the contract."""
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"[nn] load_state_dict: expected a dict of name -> Tensor or numpy array, got "
                        f"{type(state_dict).__name__}; build one with get_state_dict(model) or "
                        f"safe_load(path)")
    bad = [f"{k!r} ({type(v).__name__})" for k, v in state_dict.items()
           if not isinstance(v, (Tensor, np.ndarray, np.generic))]
    if bad:
        raise TypeError(f"[nn] load_state_dict: values must be tg Tensors or numpy arrays, got "
                        f"{_shown(bad)}; convert them with np.asarray")
    missing = [k for k in targets if k not in state_dict]
    unexpected = [k for k in state_dict if k not in targets]
    mismatched = [(k, t.shape, tuple(state_dict[k].shape)) for k, t in targets.items()
                  if k in state_dict and tuple(state_dict[k].shape) != t.shape]
    if mismatched or (strict and (missing or unexpected)):
        raise StateDictError(missing if strict else [], unexpected if strict else [], mismatched)
    written: list[Tensor] = []
    for name, target in targets.items():
        value = state_dict.get(name)
        if value is None or value is target or target.numel() == 0:   # nothing to copy
            continue
        if isinstance(value, Tensor):
            value = value.to(target.device).detach()     # copied as values, as torch's (under no_grad)
        target.assign(value if isinstance(value, Tensor) else np.asarray(value))
        written.append(target)
    if written:
        written[0].realize(*written[1:])   # one schedule for the whole model
    return LoadResult(missing, unexpected)
