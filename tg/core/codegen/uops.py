"""The lowest IR: a kernel as a straight list of UOps, what the linearizer emits and the renderer
writes out line by line. The set is closed: the renderer handles every member
(tests/core/test_null_render.py lowers the op suite, sees every member and renders each).

    >>> from tg.core.dtype import dtypes
    >>> UOp(UOps.CONST, dtypes.float32, arg=1.5).op.name
    'CONST'
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

from tg.core.dtype import DType


class UOps(Enum):
    DEFINE_GLOBAL = auto()   # arg (buffer index, is output): a kernel parameter
    GID = auto()             # arg (dim, size): a parallel dim from the global id (GPUs)
    GROUP = auto()           # arg (dim, local var): one work-group per output (GPU grouped reduce)
    LOOP = auto()            # arg (var, size, dims collapsed in parallel): opens a for loop
    ENDLOOP = auto()         # closes the innermost open loop
    CONST = auto()           # arg: the value
    INDEX_COND = auto()      # arg: a symbolic condition (a padded or masked read is valid)
    LOAD = auto()            # arg (buffer, index, valid, access)
    ALU = auto()             # arg (op from ops.py, op arg); src: operands
    DEFINE_ACC = auto()      # arg: the reduce's identity; a register accumulator
    ACC = auto()             # arg: reduce op; src (acc, value): acc = acc op value
    HREDUCE = auto()         # arg (reduce op, i); src: a group of vectors; the lanes of src[i] folded
    LOCAL_REDUCE = auto()    # arg: reduce op; partials of a work-group met in local memory
    STORE = auto()           # arg (buffer, index, valid, access); src (value,)


@dataclass
class UOp:
    """One low-level op. `vec` marks a SIMD value of the kernel's lane count."""
    op: UOps
    dtype: DType | None = None
    src: tuple[UOp, ...] = ()
    arg: Any = None
    vec: bool = False
