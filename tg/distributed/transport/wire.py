"""What travels between ranks, in bytes: the frame every point-to-point transport sends, and the
descriptor every collective agrees on before data moves.

A frame is a fixed 24-byte header (magic, kind, flags, sequence number, argument, payload bytes) and
its payload. A descriptor names a call: its op, reduce op, dtype code, root and shape; ranks compare
a 62-bit hash of it (the agreement), and on a mismatch every rank describes every rank's call in the
same error.

    >>> describe(encode_desc("all_reduce", np.dtype(np.float32), (2, 3), red=1))
    'all_reduce float32[2, 3] op=SUM'
    >>> op, shape = list_call([7] * 1000)         # 1000 arrays gathered as one call: a fixed size
    >>> desc = encode_desc(op, np.dtype(np.float32), shape)
    >>> len(desc) <= DESC_MAX, describe(desc).split(" (")[0]
    (True, 'all_gather of 1000 float32 arrays')
"""
from __future__ import annotations

import hashlib
import struct
from functools import lru_cache

import numpy as np

from tg.distributed.errors import DistributedError

FRAME = struct.Struct("<4sBBHIIQ")     # magic, kind, flags, reserved, seq, arg, payload bytes
MAGIC = b"TGMS"
DATA, DESC, ABORT, P2P = 1, 2, 3, 4    # frame kinds
MAX_CONTROL = 4096                     # DESC and ABORT payloads are small; a larger claim is malformed


def header(kind: int, seq: int, arg: int, nbytes: int, flags: int = 0) -> bytes:
    """A frame's header."""
    return FRAME.pack(MAGIC, kind, flags, 0, seq & 0xFFFFFFFF, arg & 0xFFFFFFFF, nbytes)


def check_in_step(kind: int, fseq: int, expect_kind: int, seq: int, peer: int, rank: int, what: str) -> None:
    """A frame of another kind or operation means the ranks called collectives in different orders."""
    if kind != expect_kind or fseq != seq & 0xFFFFFFFF:
        raise DistributedError(
            f"[distributed] {what}: rank {peer} is out of step with rank {rank} "
            f"(it sent frame kind {kind} of operation #{fseq}, expected kind {expect_kind} "
            f"of #{seq}); the ranks called collectives in different orders"
        )


OPS = ["all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "gather", "scatter",
       "all_to_all", "barrier", "send", "leave", "all_gather_list"]
DESC_HEAD = struct.Struct("<BBbiB")   # op, reduce op, dtype code, root, ndim
# Every descriptor fits in DESC_MAX bytes, whatever the call, so every path that carries one (control
# frames, the shm engine's slot header, MPI's fixed block) holds it whole: an array has at most
# MAX_DIMS dimensions (numpy's limit), and a list of arrays gathered as one call is described by its
# count, total size and a digest of the sizes (not a field per array: ZeRO gathers thousands of buckets).
MAX_DIMS = 64
DESC_MAX = DESC_HEAD.size + 8 * MAX_DIMS
REDUCE_OPS = {1: "SUM", 2: "PRODUCT", 3: "MIN", 4: "MAX", 5: "AVG", 6: "BAND", 7: "BOR", 8: "BXOR"}
# bfloat16 on the wire: numpy has no such type, so its 16-bit words travel as this two-byte record; the
# reductions widen each to float32 (the bits in the top half), combine, and round back to nearest even
# (a NaN stays a quiet NaN with its top bits), so a mixed-precision job's gradients move half the bytes
BF16 = np.dtype([("bfloat16", "<u2")])
# what a collective carries: numpy's native-order numeric types (object, string, datetime... are not data),
# and BF16 (last: its code follows the others in the C engines' enum)
DTYPE_CODES = [np.dtype(t).str for t in ("bool", "int8", "uint8", "=i2", "=u2", "=i4", "=u4", "=i8", "=u8",
                                         "=f2", "=f4", "=f8", "=c8", "=c16")] + [BF16.str]


def bf16_widen(words: np.ndarray) -> np.ndarray:
    """bfloat16 words (BF16 or uint16) as float32 values (tg.core.dtype's conversion)."""
    from tg.core.dtype import bf16_to_f32
    return bf16_to_f32(np.asarray(words).view(np.uint16))


def bf16_narrow(values: np.ndarray, out: np.ndarray) -> None:
    """float32 values rounded to bfloat16 (tg.core.dtype's rounding: nearest even, a NaN quiet with its
    top bits) into out's words (BF16 or uint16, values' shape)."""
    from tg.core.dtype import f32_to_bf16
    out.view(np.uint16)[...] = f32_to_bf16(values)


def is_bf16(dtype: np.dtype) -> bool:
    """Whether dtype is BF16 itself (its field name and byte order too: another two-byte record, or a
    plain 'V2', has the same .str and is no bfloat16)."""
    return np.dtype(dtype) == BF16


def dtype_name(dtype: np.dtype) -> str:
    return "bfloat16" if is_bf16(dtype) else np.dtype(dtype).name


def code_name(code: str) -> str:
    """The name of a DTYPE_CODES entry."""
    return "bfloat16" if code == BF16.str else np.dtype(code).name


def carried(dtype: np.dtype, what: str) -> None:
    """Raise TypeError at the call, before any byte moves, for a dtype collectives cannot carry."""
    dt = np.dtype(dtype)
    if dt.str in DTYPE_CODES and (dt.str != BF16.str or dt == BF16):
        return
    names = ", ".join(code_name(c) for c in DTYPE_CODES)
    hint = ("convert it with arr.astype(arr.dtype.newbyteorder('='))" if dt.kind in "biufc" else
            "bfloat16 words travel as tg.distributed.transport.wire.BF16 (view a uint16 array as it)"
            if dt.kind == "V" else
            "collectives move numbers; send objects with broadcast_object / all_gather_object")
    raise TypeError(f"[distributed] {what}: cannot send a {dt.name} ({dt.str}) array; collectives carry "
                    f"native-order {names}; {hint}")


def list_call(sizes: list[int]) -> tuple[str, tuple[int, ...]]:
    """(op, shape) of the descriptor of an all_gather of arrays of these sizes as one call: (count, total
    elements, a 62-bit digest of the sizes), so a call over other pieces never agrees with it."""
    digest = desc_hash(struct.pack(f"<{len(sizes)}Q", *sizes))
    return "all_gather_list", (len(sizes), sum(sizes), digest)


def encode_desc(op: str, dtype: np.dtype, shape: tuple[int, ...], root: int = -1, red: int = 0) -> bytes:
    assert len(shape) <= MAX_DIMS, f"a descriptor holds at most {MAX_DIMS} dimensions, got {len(shape)}"
    code = DTYPE_CODES.index(np.dtype(dtype).str) if np.dtype(dtype).str in DTYPE_CODES else -1
    return DESC_HEAD.pack(OPS.index(op), red, code, root, len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)


@lru_cache(maxsize=4096)
def described(op: str, dtype: np.dtype, shape: tuple[int, ...], root: int = -1,
              red: int = 0) -> tuple[bytes, int]:
    """(descriptor, its hash) of a call: encode_desc and desc_hash, cached (a training loop repeats a few)."""
    desc = encode_desc(op, dtype, shape, root, red)
    return desc, desc_hash(desc)


@lru_cache(maxsize=4096)
def desc_hash(desc: bytes) -> int:
    """A 62-bit hash of a descriptor (cached: a training loop repeats a few calls)."""
    return int.from_bytes(hashlib.blake2b(desc, digest_size=8).digest(), "little") >> 2


def describe(desc: bytes) -> str:
    try:
        op, red, code, root, ndim = DESC_HEAD.unpack(desc[:DESC_HEAD.size])
        shape = struct.unpack(f"<{ndim}Q", desc[DESC_HEAD.size:DESC_HEAD.size + 8 * ndim])
        name = OPS[op]
    except (struct.error, IndexError):
        return f"a malformed call ({desc[:32].hex()})"
    if name in ("barrier", "leave"):
        return "destroy_process_group (leaving)" if name == "leave" else name
    dt = code_name(DTYPE_CODES[code]) if 0 <= code < len(DTYPE_CODES) else "?"
    if name == "all_gather_list" and len(shape) == 3:
        return f"all_gather of {shape[0]} {dt} arrays ({shape[1]} elements, sizes #{shape[2]:x})"
    extra = f" root={root}" if root >= 0 else ""
    return f"{name} {dt}[{', '.join(map(str, shape))}]{extra}" + (
        f" op={REDUCE_OPS.get(red, red)}" if red else ""
    )


def disagreement(what: str, descs: list[bytes], ranks: list[int]) -> DistributedError:
    """The error every rank raises when the ranks' descriptors differ (descs[i] is group rank i's): the
    odd ranks are those outside the largest set of ranks in one call; with no single largest set,
    every view is named. Every transport's agreement words its error here (algorithms.Call, the mpi
    collectives, the C engines through their Python side)."""
    views: dict[bytes, list[int]] = {}
    for i, desc in enumerate(descs):
        views.setdefault(desc, []).append(ranks[i])
    if len(views) == 1:      # the hashes differed, every descriptor is the same: a hash collision
        return DistributedError(f"[distributed] {what}: the ranks disagree on the call, but every descriptor "
                                f"is {describe(descs[0])} (a collision of their hashes)")
    order = sorted(views.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))

    def who(rs: list[int]) -> str:
        return f"rank {rs[0]}" if len(rs) == 1 else f"ranks {', '.join(map(str, rs))}"
    fix = "every rank must make the same collective calls in the same order"
    if len(order) > 1 and len(order[0][1]) > len(order[1][1]):
        odd = "; ".join(f"{who(rs)} called {describe(d)}" for d, rs in order[1:])
        desc, rest = order[0]
        return DistributedError(
            f"[distributed] {what}: {odd}, but {who(rest)} called {describe(desc)}; {fix}"
        )
    said = "; ".join(f"{who(rs)} called {describe(d)}" for d, rs in order)
    return DistributedError(f"[distributed] {what}: the ranks disagree: {said}; {fix}")
