"""torch.linalg's norms and cross product: `tg.linalg.norm(x)`, `from tg import linalg`,
`import tg.linalg`. Each is a composition of Tensor methods, so autograd differentiates it.

    >>> import tg
    >>> x = tg.tensor([[3.0, 4.0]])
    >>> tg.linalg.vector_norm(x).item(), tg.linalg.norm(x, dim=1).tolist()
    (5.0, [5.0])
"""
from __future__ import annotations

from typing import Any

from tg.core.autocast import autocast_op
from tg.core.dtype import DType
from tg.core.tensor import Tensor

__all__ = ["vector_norm", "matrix_norm", "norm", "cross"]


def vector_norm(x: Tensor, ord: Any = 2, dim: Any = None, keepdim: bool = False, *,  # noqa: A002
                dtype: DType | None = None) -> Tensor:
    """The vector ord-norm over dim (all elements when None): inf the largest |x|, -inf the smallest,
    0 the count of nonzeros (Tensor.norm).

        >>> vector_norm(Tensor([[3.0, -4.0]]), 1, dim=1).tolist()
        [7.0]
    """
    return x.norm(ord, dim, keepdim, dtype=dtype)


def matrix_norm(x: Tensor, ord: Any = "fro", dim: tuple[int, int] = (-2, -1),  # noqa: A002
                keepdim: bool = False) -> Tensor:
    """The Frobenius norm of the matrices in dims `dim` (the only ord tg has).

        >>> matrix_norm(Tensor([[[3.0, 0.0], [0.0, 4.0]]])).tolist()
        [5.0]
    """
    if ord != "fro":
        raise ValueError(f"[core] linalg.matrix_norm: only ord='fro' is supported, got {ord!r}; "
                         f"fix: pass ord='fro', or compute the norm from the singular values yourself")
    if not (isinstance(dim, (tuple, list)) and len(dim) == 2):
        raise ValueError(f"[core] linalg.matrix_norm: expected dim as a pair of dims, got {dim!r}")
    return x.norm(2, tuple(dim), keepdim)


@autocast_op
def norm(x: Tensor, ord: Any = None, dim: Any = None, keepdim: bool = False) -> Tensor:  # noqa: A002
    """vector_norm of all elements or over one dim, matrix_norm over a pair of dims (ord None: 2 or 'fro').

        >>> norm(Tensor([[3.0, 4.0]])).item(), norm(Tensor([[3.0, 4.0]]), dim=(0, 1)).item()
        (5.0, 5.0)
    """
    if isinstance(dim, (tuple, list)) and len(dim) == 2:
        return matrix_norm(x, "fro" if ord is None else ord, (dim[0], dim[1]), keepdim)
    return x.norm(2 if ord is None else ord, dim, keepdim)


@autocast_op
def cross(a: Tensor, b: Tensor, dim: int = -1) -> Tensor:
    """The 3-d cross product along dim (the last, by default, as torch.linalg.cross).

        >>> cross(Tensor([1.0, 0.0, 0.0]), Tensor([0.0, 1.0, 0.0])).tolist()
        [0.0, 0.0, 1.0]
    """
    return a.cross(b, dim)
