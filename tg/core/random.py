"""The random number generator behind Tensor.rand / randn / randint / dropout: a counter-based hash
run on the device, so the same seed gives the same numbers on every device, with no host work.

Word i of a draw of n is hash(hash(i + counter) ^ hash(seed)), lowbias32 as the hash; `counter` is a
realized uint32[1] on the device, advanced in place by n after each draw, so every draw differs, also
when a TinyJit replays the kernels. Everything here works on LazyBuffers; tensor.py wraps it.

    >>> manual_seed(7)
    >>> a = to_numpy(random_bits(4, "NUMPY"))
    >>> manual_seed(7)
    >>> bool((to_numpy(random_bits(4, "NUMPY")) == a).all()), state(on_device=False)["counters"]
    (True, {'NUMPY': 4})
"""
from __future__ import annotations

from typing import Any

import numpy as np

from tg.core.dtype import dtypes
from tg.core.lazy import LazyBuffer
from tg.core.ops import BinaryOps, UnaryOps
from tg.core.realize import from_numpy, realize, to_numpy
from tg.core.shape import prod

_seed = 0
_counters: dict[str, LazyBuffer] = {}      # device -> realized uint32[1]: words drawn since the seed
_host_draws = 0                            # host_seed() calls since the seed
_ARANGE: dict[tuple[int, str], LazyBuffer] = {}


def manual_seed(seed: int = 0) -> None:
    """Seed every later draw; counters start again from 0 on every device, and host_seed's sequence."""
    global _seed, _counters, _host_draws
    _seed = int(seed) & 0xFFFFFFFF
    _counters = {}
    _host_draws = 0


def host_seed() -> int:
    """The next 62-bit seed for host randomness that has no generator of its own (a sampler's order, a
    dataset split, the loader's worker seeds), as torch draws one from its default generator: the same
    sequence after the same manual_seed, different seeds along it. No device is touched.

        >>> manual_seed(3)
        >>> first = [host_seed(), host_seed()]
        >>> manual_seed(3)
        >>> [host_seed(), host_seed()] == first, first[0] != first[1]
        (True, True)
    """
    global _host_draws
    _host_draws += 1
    key = hash32(_seed ^ 0x85EBCA6B)
    hi, lo = hash32(hash32(2 * _host_draws) ^ key), hash32(hash32(2 * _host_draws + 1) ^ key)
    return ((hi << 32) | lo) >> 2


def hash32(x: int) -> int:
    """lowbias32 (an integer hash with good avalanche), on a Python int."""
    x &= 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def _with(x: LazyBuffer, op: BinaryOps, value: int | float) -> LazyBuffer:
    return x.e(op, LazyBuffer.const(value, x.dtype, x.device, x.shape))


def _hash(x: LazyBuffer) -> LazyBuffer:
    """hash32 on a uint32 buffer (wrapping multiplies), as an ordinary kernel."""
    x = x.e(BinaryOps.XOR, _with(x, BinaryOps.SHR, 16))
    x = _with(x, BinaryOps.MUL, 0x7FEB352D)
    x = x.e(BinaryOps.XOR, _with(x, BinaryOps.SHR, 15))
    x = _with(x, BinaryOps.MUL, 0x846CA68B)
    return x.e(BinaryOps.XOR, _with(x, BinaryOps.SHR, 16))


def _arange(n: int, device: str) -> LazyBuffer:
    key = (n, device)
    if key not in _ARANGE:
        if len(_ARANGE) > 64:
            _ARANGE.clear()
        _ARANGE[key] = from_numpy(np.arange(n, dtype=np.uint32), dtypes.uint32, device)
    return _ARANGE[key]


def device_copy(x: LazyBuffer) -> LazyBuffer:
    """A realized copy of x in fresh memory, made by a kernel on x's device (no host round trip)."""
    out = LazyBuffer.empty(x.shape, x.dtype, x.device).assign(x)
    realize([out])
    return out


def random_bits(n: int, device: str) -> LazyBuffer:
    """n uniformly random uint32s on `device` (realized), advancing its counter by n."""
    counter = _counters.get(device)
    if counter is None:
        counter = _counters[device] = from_numpy(np.zeros(1, np.uint32), dtypes.uint32, device)
    key = hash32(_seed ^ 0x9E3779B9)
    idx = _arange(n, device).e(BinaryOps.ADD, counter.reshape((1,)).expand((n,)))
    bits = _with(_hash(idx), BinaryOps.XOR, key)
    bits = _hash(bits)
    realize([bits])
    _counters[device] = advanced = counter.assign(_with(counter, BinaryOps.ADD, n & 0xFFFFFFFF))
    realize([advanced])
    return bits


def uniform01(shape: tuple[int, ...], device: str, mantissa: int = 24) -> LazyBuffer:
    """float32s in [0, 1) with `mantissa` random bits each: as many as the target dtype holds, so
    rounding into it can never reach 1.0."""
    bits = random_bits(prod(shape), device)
    top = _with(bits, BinaryOps.SHR, 32 - mantissa).e(UnaryOps.CAST, arg=dtypes.float32)
    return _with(top, BinaryOps.MUL, 1.0 / (1 << mantissa)).reshape(shape)


def state(on_device: bool) -> dict[str, Any]:
    """{"seed": int, "counters": {device: words drawn}, "host": host_seed() calls}: ints read back
    from the devices, or with on_device each count a realized uint32[1] copy made on its device (no
    host read)."""
    counters: dict[str, Any] = {}
    for device, counter in _counters.items():
        counters[device] = device_copy(counter) if on_device else int(to_numpy(counter)[0])
    return {"seed": _seed, "counters": counters, "host": _host_draws}


def is_state(state: Any) -> bool:
    """Whether state is a dict state() made: "seed" and "counters", and "host" unless it predates it."""
    return isinstance(state, dict) and {"seed", "counters"} <= set(state) <= {"seed", "counters", "host"}


def set_state(seed: int, counters: dict[str, int | LazyBuffer], host: int = 0) -> None:
    """Restore a state(): counters are written in place on their devices; a device with no saved
    count starts again from 0, as after manual_seed; host_seed's sequence goes on from `host`."""
    global _seed, _host_draws
    _seed = int(seed) & 0xFFFFFFFF
    _host_draws = int(host)
    for device in {*counters, *_counters}:
        value = counters.get(device, 0)
        if not isinstance(value, LazyBuffer):
            value = from_numpy(np.array([int(value) & 0xFFFFFFFF], np.uint32), dtypes.uint32, device)
        elif value.device != device:
            value = value.copy_to_device(device)
        counter = _counters.get(device)
        if counter is None:
            _counters[device] = device_copy(value)
        else:
            _counters[device] = written = counter.assign(value)
            realize([written])
