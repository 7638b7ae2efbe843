"""The Tensor class in parts: each module holds one mixin of methods along the class's sections
(elementwise, math, movement, indexing, reduce, nn), base.py what they share. tg/core/tensor.py keeps
construction, properties, realization and autograd, builds `Tensor` from the mixins and binds the name
`Tensor` in each module here (`bind`): their methods make Tensors, and the class cannot exist before
its parts. Methods reach each other through `self`, as in one class."""
from __future__ import annotations

from typing import Any


def bind(tensor_class: type) -> None:
    """Make `Tensor` in every mixin module the finished class (tg/core/tensor.py calls it once)."""
    from tg.core.mixin import base, elementwise, indexing, math, movement, nn, reduce
    modules: tuple[Any, ...] = (base, elementwise, math, movement, indexing, reduce, nn)
    for module in modules:
        module.Tensor = tensor_class
