"""torch.nn.utils.rnn: sequences of different lengths in one batch. A PackedSequence holds the steps of
every sequence, longest first, time step after time step: `data` is (sum of lengths, *) with step t's
rows for the sequences still running at t (`batch_sizes[t]` of them, never more than at t - 1);
`sorted_indices` / `unsorted_indices` map between the caller's order and longest-first (None when the
caller's lengths were sorted already). nn.RNN, nn.LSTM and nn.GRU take one and give one back, running
each sequence for its own length: h_n is each sequence's state after its own last step (in the caller's
order), exactly what running it alone gives.

    >>> from tg import Tensor
    >>> x = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]]).unsqueeze(-1)      # (N, L, 1), lengths 3 and 2
    >>> p = pack_padded_sequence(x, [3, 2], batch_first=True)
    >>> p.data.squeeze(-1).tolist(), p.batch_sizes.tolist()
    ([1.0, 4.0, 2.0, 5.0, 3.0], [2, 2, 1])
    >>> padded, lengths = pad_packed_sequence(p, batch_first=True)
    >>> padded.squeeze(-1).tolist(), lengths.tolist()
    ([[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]], [3, 2])
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from tg.core.dtype import dtypes
from tg.core.tensor import Tensor


class PackedSequence(NamedTuple):
    """The steps of a batch of sequences, longest first (see the module's docstring)."""
    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None = None
    unsorted_indices: Tensor | None = None

    def sizes(self) -> list[int]:
        """batch_sizes as Python ints."""
        return [int(b) for b in self.batch_sizes.tolist()]

    def to(self, *args: Any, **kwargs: Any) -> PackedSequence:
        """The same sequence with its data moved or cast (the sizes and orders stay where they are)."""
        return self._replace(data=self.data.to(*args, **kwargs))

    @property
    def is_cuda(self) -> bool:
        return self.data.is_cuda


def _lengths(lengths: Any, n: int) -> np.ndarray:
    got = np.asarray(lengths.tolist() if isinstance(lengths, Tensor) else lengths)
    if got.ndim != 1 or got.shape[0] != n or (got.size and (got.dtype.kind not in "iu" or got.min() <= 0)):
        raise ValueError(f"[nn] pack_padded_sequence: expected lengths, one positive int per sequence ({n}), "
                         f"got {lengths!r}")
    return got.astype(np.int64)


def pack_padded_sequence(input: Tensor, lengths: Any, batch_first: bool = False,  # noqa: A002
                         enforce_sorted: bool = True) -> PackedSequence:
    """A padded batch (L, N, *) ((N, L, *) with batch_first) and each sequence's length as a
    PackedSequence. With enforce_sorted the lengths must not increase (an error says so); else they are
    sorted here and the result remembers how."""
    x = input.transpose(0, 1) if batch_first else input
    if x.ndim < 2:
        raise ValueError(f"[nn] pack_padded_sequence: expected input (L, N, *) or (N, L, *) with "
                         f"batch_first, got shape {input.shape}")
    seq, n = x.shape[0], x.shape[1]
    lens = _lengths(lengths, n)
    if lens.size and lens.max() > seq:
        raise ValueError(f"[nn] pack_padded_sequence: a length ({lens.max()}) exceeds the padded "
                         f"length {seq}")
    sorted_idx = unsorted_idx = None
    if enforce_sorted:
        if np.any(np.diff(lens) > 0):
            raise ValueError(f"[nn] pack_padded_sequence: lengths {lens.tolist()} are not sorted longest "
                             "first; sort the batch, or pass enforce_sorted=False")
    else:
        order = np.argsort(-lens, kind="stable")
        lens = lens[order]
        sorted_idx = Tensor(order.astype(np.int64), device=x.device)
        unsorted_idx = Tensor(np.argsort(order, kind="stable").astype(np.int64), device=x.device)
        x = x.index_select(1, sorted_idx)
    sizes = [int((lens > t).sum()) for t in range(int(lens.max()) if lens.size else 0)]
    data = Tensor.cat(*[x[t, :b] for t, b in enumerate(sizes)], dim=0) if sizes else x[:0].flatten(0, 1)
    return PackedSequence(data, Tensor(np.array(sizes, np.int64), dtype=dtypes.int64, device="CPU"),
                          sorted_idx, unsorted_idx)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0,
                        total_length: int | None = None) -> tuple[Tensor, Tensor]:
    """The padded batch (L, N, *) ((N, L, *) with batch_first) of a PackedSequence, in the caller's
    order, and each sequence's length (int64): the inverse of pack_padded_sequence. total_length pads
    to that many steps (at least the longest)."""
    sizes = sequence.sizes()
    data = sequence.data
    steps = len(sizes)
    if total_length is not None and total_length < steps:
        raise ValueError(f"[nn] pad_packed_sequence: total_length {total_length} is shorter than the longest "
                         f"sequence ({steps} steps)")
    length = steps if total_length is None else total_length
    n = sizes[0] if sizes else 0
    rows, start = [], 0
    for b in sizes:
        part = data[start:start + b]
        if b < n:
            part = part.cat(Tensor.full((n - b, *data.shape[1:]), padding_value, dtype=data.dtype,
                                        device=data.device))
        rows.append(part)
        start += b
    rows += [Tensor.full((n, *data.shape[1:]), padding_value, dtype=data.dtype, device=data.device)] * \
        (length - steps)
    padded = Tensor.stack(rows) if rows else Tensor.zeros(0, 0, *data.shape[1:], dtype=data.dtype,
                                                          device=data.device)
    lens = np.array([sum(1 for b in sizes if b > i) for i in range(n)], np.int64)
    if sequence.unsorted_indices is not None:
        padded = padded.index_select(1, sequence.unsorted_indices)
        lens = lens[np.asarray(sequence.unsorted_indices.tolist(), np.int64)]
    return (padded.transpose(0, 1) if batch_first else padded), Tensor(lens, dtype=dtypes.int64, device="CPU")


def pad_sequence(sequences: Sequence[Tensor], batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Tensors (L_i, *) padded to the longest into (L, N, *) ((N, L, *) with batch_first)."""
    if not sequences:
        raise ValueError("[nn] pad_sequence: expected at least one tensor")
    if padding_side not in ("right", "left"):
        raise ValueError(f"[nn] pad_sequence: padding_side is 'right' or 'left', got {padding_side!r}")
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        gap = [(0, 0)] * s.ndim
        gap[0] = (0, longest - s.shape[0]) if padding_side == "right" else (longest - s.shape[0], 0)
        padded.append(s.pad(tuple(gap), value=padding_value))
    return Tensor.stack(padded, dim=0 if batch_first else 1)


def pack_sequence(sequences: Sequence[Tensor], enforce_sorted: bool = True) -> PackedSequence:
    """Tensors (L_i, *) as one PackedSequence (pad_sequence, then pack_padded_sequence)."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences: Tensor, lengths: Any, batch_first: bool = False) -> list[Tensor]:
    """The inverse of pad_sequence: each sequence cut to its length."""
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [x[i, :int(n)] for i, n in enumerate(_lengths(lengths, x.shape[0]))]


def unpack_sequence(packed_sequences: PackedSequence) -> list[Tensor]:
    """The inverse of pack_sequence: the tensors (L_i, *), in the caller's order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
