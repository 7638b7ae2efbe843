"""nn.Module, nn.Parameter and the containers ModuleList / ModuleDict, with torch.nn's behaviour.

A Module registers what its attributes hold: a Module becomes a submodule, a Parameter (or any Tensor
with requires_grad=True: tg's layers have always made their weights that way) a parameter, a name
given to register_buffer a buffer. Any other Tensor stays a plain attribute, outside state_dict(),
as in torch. Names follow torch's state dicts: `encoder.0.weight`.

A module is in training mode from construction, as torch's: `training` is True until train() /
eval() set it on the module (and its submodules). Code in tinygrad's style that sets the global
`Tensor.training` keeps working: a module whose mode train() / eval() never set follows the global
once code has set it (`Tensor.training = None` unsets it again). Dropout and BatchNorm read
`self.training`.

    >>> from tg import Tensor
    >>> from tg.nn import Linear
    >>> class Net(Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.body = ModuleList([Linear(3, 4), Linear(4, 4)])
    ...         self.head = Linear(4, 2, bias=False)
    ...         self.register_buffer("steps", Tensor.zeros(()))
    ...     def forward(self, x: Tensor) -> Tensor:
    ...         for layer in self.body:
    ...             x = layer(x).relu()
    ...         return self.head(x)
    >>> net = Net()
    >>> list(net.state_dict())
    ['steps', 'body.0.weight', 'body.0.bias', 'body.1.weight', 'body.1.bias', 'head.weight']
    >>> net(Tensor.ones(5, 3)).shape, net.eval().training, net.head.training
    ((5, 2), False, False)
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar

from tg.core import trace
from tg.core.device import Device
from tg.core.ops import UnaryOps
from tg.core.tensor import Tensor
from tg.nn.loading import LoadResult, load_into

__all__ = ["Module", "Parameter", "ModuleList", "ModuleDict"]

ModuleT = TypeVar("ModuleT", bound="Module")


class Parameter(Tensor):
    """A Tensor that a Module registers as a parameter: data's values (shared, not copied), on data's
    device, with requires_grad. Results of ops on it are plain Tensors.

        >>> from tg import Tensor
        >>> w = Parameter(Tensor([1.0, 2.0]))
        >>> isinstance(w, Tensor), w.requires_grad, type(w * 2).__name__
        (True, True, 'Tensor')
    """
    __slots__ = ()

    def __init__(self, data: Tensor | Any, requires_grad: bool = True):
        if isinstance(data, Tensor):
            super().__init__(data.lazydata, device=data.device, requires_grad=requires_grad)
        else:
            super().__init__(data, requires_grad=requires_grad)

    def __repr__(self) -> str:
        return f"Parameter({self.shape}, device={self.device!r}, dtype={self.dtype})"


def _is_parameter(value: Any) -> bool:
    return isinstance(value, Parameter) or (isinstance(value, Tensor) and value.requires_grad is True)


def _holds_registrable(value: Any) -> bool:
    if isinstance(value, Mapping):
        value = list(value.values())
    items = value if isinstance(value, (list, tuple)) else ()
    return any(isinstance(v, (Module, Parameter)) for v in items)


class Module:
    """Base class of layers and models: subclass it, call super().__init__() first, assign layers and
    parameters as attributes and write forward(); calling the module calls forward.

    `training` is True from construction, as in torch, and what train() / eval() set on the module
    or a parent; a module they never set follows the global Tensor.training once code sets it.

        >>> from tg import Tensor
        >>> from tg.nn import Linear, Dropout
        >>> class MLP(Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.fc, self.drop = Linear(2, 3), Dropout(0.5)
        ...         self.scale = Parameter(Tensor.ones(3))
        ...     def forward(self, x: Tensor) -> Tensor:
        ...         return self.drop(self.fc(x)) * self.scale
        >>> model = MLP()
        >>> [name for name, _ in model.named_parameters()]
        ['scale', 'fc.weight', 'fc.bias']
        >>> [name for name, _ in model.named_children()], model(Tensor.ones(4, 2)).shape
        (['fc', 'drop'], (4, 3))
    """
    _parameters: dict[str, Tensor | None]
    _buffers: dict[str, Tensor | None]
    _non_persistent: set[str]
    _modules: dict[str, Module | None]
    _training: bool | None

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "_training", None)

    # ------------------------------------------------------------ calling
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The computation; every subclass defines it."""
        raise NotImplementedError(f"[nn] {type(self).__name__}: a Module subclass must define forward(); "
                                  f"calling the module calls forward with the same arguments")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if trace.ON:
            with trace.region(type(self).__name__, "module"):
                return self.forward(*args, **kwargs)
        return self.forward(*args, **kwargs)

    # ------------------------------------------------------------ registration
    def _registries(self, name: str, value: Any) -> tuple[dict[str, Any], ...]:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"[nn] {type(self).__name__}: cannot assign {type(value).__name__} {name!r} "
                                 f"before Module.__init__() ran; fix: call super().__init__() first")
        return self._parameters, self._buffers, self._modules

    def _check_name(self, name: str, kind: str) -> None:
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f"[nn] {type(self).__name__}: {kind} name must be a non-empty str without '.', "
                           f"got {name!r}")
        registered = any(name in reg for reg in (self._parameters, self._buffers, self._modules))
        if not registered and hasattr(type(self), name):
            raise KeyError(f"[nn] {type(self).__name__}: {kind} name {name!r} is taken by a method or class "
                           f"attribute; pick another name")

    def _register(self, registry: dict[str, Any], name: str, value: Any) -> None:
        for other in (self._parameters, self._buffers, self._modules):
            if other is not registry:
                other.pop(name, None)
        if registry is not self._buffers:
            self._non_persistent.discard(name)
        self.__dict__.pop(name, None)   # a plain attribute of that name would hide the registered value
        registry[name] = value

    def _register_checked(self, name: str, value: Any, kind: str, expected: type) -> None:
        # the shared body of register_parameter / register_buffer / add_module
        registry = self._registries(name, value)[("parameter", "buffer", "module").index(kind)]
        self._check_name(name, kind)
        if value is not None and not isinstance(value, expected):
            label = "submodule" if kind == "module" else kind
            raise TypeError(f"[nn] {type(self).__name__}: {label} {name!r} must be a {expected.__name__} or "
                            f"None, got {type(value).__name__}")
        self._register(registry, name, value)

    def register_parameter(self, name: str, param: Tensor | None) -> None:
        """Register param (a Tensor, or None for an absent optional one such as a bias) as name.

            >>> from tg import Tensor
            >>> m = Module()
            >>> m.register_parameter("w", Parameter(Tensor.zeros(2)))
            >>> list(m.state_dict()), m.w.shape
            (['w'], (2,))
        """
        self._register_checked(name, param, "parameter", Tensor)

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Register a Tensor that is state but not a parameter (running statistics, a step count).
        Persistent buffers are in state_dict(); all buffers move with to().

            >>> from tg import Tensor
            >>> m = Module()
            >>> m.register_buffer("mean", Tensor.zeros(3))
            >>> m.register_buffer("cache", Tensor.zeros(3), persistent=False)
            >>> list(m.state_dict()), [name for name, _ in m.named_buffers()]
            (['mean'], ['mean', 'cache'])
        """
        self._register_checked(name, tensor, "buffer", Tensor)
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Register module as the submodule name (what assigning an attribute does).

            >>> from tg.nn import Linear
            >>> m = Module()
            >>> m.add_module("proj", Linear(2, 2))
            >>> list(m.state_dict())
            ['proj.weight', 'proj.bias']
        """
        self._register_checked(name, module, "module", Module)

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Module):
            self._register_checked(name, value, "module", Module)
        elif isinstance(value, Tensor):
            params, buffers, _ = self._registries(name, value)
            if name in buffers:
                buffers[name] = value
            elif name in params or _is_parameter(value):
                self._check_name(name, "parameter")
                self._register(params, name, value)
            else:
                self._set_plain(name, value)
        else:
            self._set_plain(name, value)

    def _set_plain(self, name: str, value: Any) -> None:
        registered = self.__dict__.get("_parameters") is not None
        if registered:
            registries: list[tuple[dict[str, Any], str]] = [
                (self._parameters, "parameter"), (self._buffers, "buffer"), (self._modules, "submodule")]
            for registry, kind in registries:
                if name not in registry:
                    continue
                if value is not None and not isinstance(value, Tensor):
                    raise TypeError(f"[nn] {type(self).__name__}: {name!r} is a {kind}: expected a "
                                    f"{'Module' if kind == 'submodule' else 'Tensor'} or None, got "
                                    f"{type(value).__name__}; fix: del the attribute first to reuse the name")
                registry[name] = value
                return
        if _holds_registrable(value):
            raise TypeError(f"[nn] {type(self).__name__}: attribute {name!r} is a {type(value).__name__} "
                            f"holding Modules or Parameters, which a Module does not register (as in torch); "
                            f"fix: wrap it in nn.ModuleList(...) or nn.ModuleDict(...)")
        object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # called only when normal lookup fails: registered values live in the registries
        for registry in ("_parameters", "_buffers", "_modules"):
            found = self.__dict__.get(registry)
            if found is not None and name in found:
                return found[name]
        raise AttributeError(f"[nn] {type(self).__name__} has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        for registry in (self._parameters, self._buffers, self._modules):
            if name in registry:
                del registry[name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    # ------------------------------------------------------------ walking
    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """(name, module) for this module ('' or prefix) and every submodule, pre-order, each once.

            >>> from tg.nn import Linear, Sequential
            >>> [name for name, _ in Sequential(Linear(2, 2), Sequential(Linear(2, 2))).named_modules()]
            ['', '0', '1', '1.0']
        """
        seen: set[int] = set()
        stack: list[tuple[str, Module]] = [(prefix, self)]
        while stack:
            name, module = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            yield name, module
            base = f"{name}." if name else ""
            stack.extend(reversed([(base + key, child) for key, child in module._modules.items()
                                   if child is not None]))

    def modules(self) -> Iterator[Module]:
        """This module and every submodule, each once.

            >>> from tg.nn import Linear, Sequential
            >>> [type(m).__name__ for m in Sequential(Linear(2, 2)).modules()]
            ['Sequential', 'Linear']
        """
        return (module for _, module in self.named_modules())

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """(name, module) of the direct submodules.

            >>> from tg.nn import Linear, Sequential
            >>> [name for name, _ in Sequential(Linear(2, 2), Linear(2, 2)).named_children()]
            ['0', '1']
        """
        seen: set[int] = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self) -> Iterator[Module]:
        """The direct submodules.

            >>> from tg.nn import Linear, Sequential
            >>> len(list(Sequential(Linear(2, 2), Linear(2, 2)).children()))
            2
        """
        return (module for _, module in self.named_children())

    def _named_tensors(self, kind: str, prefix: str, recurse: bool) -> Iterator[tuple[str, Tensor]]:
        seen: set[int] = set()   # a tensor shared by two modules (tied weights) counts once
        modules = self.named_modules(prefix) if recurse else iter([(prefix, self)])
        for module_name, module in modules:
            base = f"{module_name}." if module_name else ""
            for name, tensor in getattr(module, kind).items():
                if tensor is not None and id(tensor) not in seen:
                    seen.add(id(tensor))
                    yield base + name, tensor

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Tensor]]:
        """(name, parameter) pairs: each module's own in registration order, modules pre-order; a
        parameter shared by two modules comes once, under its first name.

            >>> from tg.nn import Linear, Sequential
            >>> [name for name, _ in Sequential(Linear(2, 2, bias=False)).named_parameters()]
            ['0.weight']
        """
        return self._named_tensors("_parameters", prefix, recurse)

    def parameters(self, recurse: bool = True) -> Iterator[Tensor]:
        """The parameters, each once (for an optimizer).

            >>> from tg.nn import Linear, optim
            >>> opt = optim.SGD(Linear(3, 2).parameters(), lr=0.1)
            >>> [p.shape for p in Linear(3, 2).parameters()]
            [(2, 3), (2,)]
        """
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Tensor]]:
        """(name, buffer) pairs, persistent or not, in named_parameters' order.

            >>> from tg.nn import BatchNorm1d
            >>> [name for name, _ in BatchNorm1d(2).named_buffers()]
            ['running_mean', 'running_var', 'num_batches_tracked']
        """
        return self._named_tensors("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """The buffers, each once.

            >>> from tg.nn import BatchNorm1d
            >>> len(list(BatchNorm1d(2).buffers()))
            3
        """
        return (b for _, b in self.named_buffers(recurse=recurse))

    # ------------------------------------------------------------ state
    def state_dict(self, prefix: str = "") -> dict[str, Tensor]:
        """name -> Tensor, torch's keys and order: a module's parameters, then its persistent buffers,
        then each submodule's entries under `name.`. The values are the module's own Tensors (not
        copies): save them with safe_save, or read them. A tied weight appears under each name.

            >>> from tg.nn import BatchNorm1d, Linear, Sequential
            >>> list(Sequential(Linear(2, 2), BatchNorm1d(2)).state_dict())
            ['0.weight', '0.bias', '1.weight', '1.bias',
             '1.running_mean', '1.running_var', '1.num_batches_tracked']
        """
        out: dict[str, Tensor] = {}
        self._save(out, prefix)
        return out

    def _save(self, out: dict[str, Tensor], prefix: str) -> None:
        for name, tensor in self._parameters.items():
            if tensor is not None:
                out[prefix + name] = tensor
        for name, tensor in self._buffers.items():
            if tensor is not None and name not in self._non_persistent:
                out[prefix + name] = tensor
        for name, module in self._modules.items():
            if module is not None:
                module._save(out, f"{prefix}{name}.")

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> LoadResult:
        """Copy state_dict's values into this module's parameters and buffers in place; the checks,
        errors and (missing_keys, unexpected_keys) result are tg.nn.state.load_state_dict's.

            >>> from tg.nn import Linear
            >>> src, dst = Linear(2, 2), Linear(2, 2)
            >>> dst.load_state_dict(src.state_dict())
            LoadResult(missing_keys=[], unexpected_keys=[])
            >>> dst.weight.tolist() == src.weight.tolist()
            True
        """
        return load_into(self.state_dict(), state_dict, strict)

    # ------------------------------------------------------------ modes and bulk changes
    @property
    def training(self) -> bool:
        """True in training mode: as train()/eval() set it; else the global Tensor.training where code
        set it; else True (torch's modules start in training mode).

            >>> from tg.nn import Dropout
            >>> Dropout(0.5).training
            True
        """
        mode = self.__dict__.get("_training")
        if mode is not None:
            return mode
        return True if Tensor.training is None else bool(Tensor.training)

    @training.setter
    def training(self, mode: bool | None) -> None:
        object.__setattr__(self, "_training", mode)

    def train(self: ModuleT, mode: bool = True) -> ModuleT:
        """Set training mode on this module and every submodule; returns self.

            >>> from tg.nn import Dropout, Sequential
            >>> model = Sequential(Dropout(0.5)).train()
            >>> model[0].training, model.eval()[0].training
            (True, False)
        """
        for module in self.modules():
            module.training = bool(mode)
        return self

    def eval(self: ModuleT) -> ModuleT:
        """train(False): Dropout is the identity and BatchNorm uses its running statistics.

            >>> from tg import Tensor
            >>> from tg.nn import Dropout
            >>> Dropout(0.9).eval()(Tensor.ones(3)).tolist()
            [1.0, 1.0, 1.0]
        """
        return self.train(False)

    def apply(self: ModuleT, fn: Callable[[Module], Any]) -> ModuleT:
        """Call fn on every submodule, then on self (an init scheme, say); returns self.

            >>> from tg import Tensor
            >>> from tg.nn import Linear, Sequential
            >>> def zero_bias(m):
            ...     if isinstance(m, Linear):
            ...         m.bias.assign(Tensor.zeros(*m.bias.shape))
            >>> Sequential(Linear(2, 3)).apply(zero_bias)[0].bias.tolist()
            [0.0, 0.0, 0.0]
        """
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's .grad: None, or zeros in place with set_to_none=False.

            >>> from tg import Tensor
            >>> from tg.nn import Linear
            >>> layer = Linear(2, 1)
            >>> _ = layer(Tensor.ones(1, 2)).sum().backward()
            >>> layer.zero_grad()
            >>> layer.weight.grad is None
            True
        """
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad.assign(Tensor.zeros(*p.grad.shape, device=p.grad.device, dtype=p.grad.dtype))

    def requires_grad_(self: ModuleT, requires_grad: bool = True) -> ModuleT:
        """Set requires_grad on every parameter (False freezes the module); returns self.

            >>> from tg.nn import Linear
            >>> [p.requires_grad for p in Linear(2, 2).requires_grad_(False).parameters()]
            [False, False]
        """
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def to(self: ModuleT, *args: Any, **kwargs: Any) -> ModuleT:
        """torch's Module.to: `to(device)`, `to(dtype)`, `to(device, dtype)`, `to(tensor)` (its device
        and dtype), or `device=` / `dtype=` (`non_blocking` is accepted). Moves every parameter, buffer
        and gradient to device, and casts the floating ones to dtype (integer buffers, such as a
        BatchNorm's count, keep theirs), in place: the Tensor objects stay the same, so an optimizer
        built before still holds them (its state, though, stays as it was: call to() before building
        the optimizer, as in torch). Returns self.

            >>> import tg
            >>> from tg.nn import Linear
            >>> layer = Linear(2, 2)
            >>> w = layer.weight
            >>> layer.to("CPU").weight is w, w.device
            (True, 'CPU')
            >>> layer.to(tg.bfloat16).weight is w, w.dtype
            (True, dtypes.bfloat16)
        """
        device, dtype = _to_arguments(args, kwargs)
        changed: list[Tensor] = []
        target_device = Device.canonicalize(str(device)) if device is not None else None
        for t in [*self.parameters(), *self.buffers()]:
            for target in (t, t.grad):
                if target is None:
                    continue
                if target_device is not None and target.device != target_device:
                    target.lazydata = target.lazydata.copy_to_device(target_device)
                    changed.append(target)
                if dtype is not None and target.dtype.is_float and target.dtype != dtype:
                    target.lazydata = target.lazydata.e(UnaryOps.CAST, arg=dtype)
                    changed.append(target)
        if changed:
            changed[0].realize(*changed[1:])
        return self

    def half(self: ModuleT) -> ModuleT:
        """Floating parameters and buffers to float16 (Module.to(tg.float16))."""
        from tg.core.dtype import dtypes
        return self.to(dtypes.float16)

    def bfloat16(self: ModuleT) -> ModuleT:
        """Floating parameters and buffers to bfloat16."""
        from tg.core.dtype import dtypes
        return self.to(dtypes.bfloat16)

    def float(self: ModuleT) -> ModuleT:
        """Floating parameters and buffers to float32."""
        from tg.core.dtype import dtypes
        return self.to(dtypes.float32)

    def double(self: ModuleT) -> ModuleT:
        """Floating parameters and buffers to float64."""
        from tg.core.dtype import dtypes
        return self.to(dtypes.float64)

    # ------------------------------------------------------------ printing
    def extra_repr(self) -> str:
        """The text inside this module's parentheses in repr() (its settings); '' by default."""
        return ""

    def _repr_children(self) -> list[tuple[str, str]]:
        return [(name, repr(module)) for name, module in self._modules.items()]

    def __repr__(self) -> str:
        """Nested like torch's: `Name(settings)`, or one indented `(name): child` line per child.

            >>> from tg import Tensor
            >>> from tg.nn import Linear, Sequential
            >>> print(Sequential(Linear(2, 3), Tensor.relu))
            Sequential(
              (0): Linear(in_features=2, out_features=3, bias=True)
              (1): relu
            )
        """
        lines = [f"({name}): " + text.replace("\n", "\n  ") for name, text in self._repr_children()]
        if not lines:
            return f"{type(self).__name__}({self.extra_repr()})"
        head = [self.extra_repr()] if self.extra_repr() else []
        return f"{type(self).__name__}(\n" + "".join(f"  {line}\n" for line in head + lines) + ")"


class ModuleList(Module):
    """A list of Modules, registered as submodules named 0, 1, ...

        >>> from tg.nn import Linear
        >>> blocks = ModuleList([Linear(2, 2) for _ in range(2)])
        >>> _ = blocks.append(Linear(2, 1))
        >>> len(blocks), list(blocks.state_dict())[-2:]
        (3, ['2.weight', '2.bias'])
    """

    def __init__(self, modules: Iterable[Module] | None = None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _items(self) -> list[Module]:
        return [m for m in self._modules.values() if m is not None]

    def _renumber(self, items: list[Module]) -> None:
        for i, module in enumerate(items):
            if not isinstance(module, Module):
                raise TypeError(f"[nn] ModuleList: expected Modules, got a {type(module).__name__} at "
                                f"index {i}; wrap a function in a Module subclass")
        self._modules.clear()
        self._modules.update((str(i), m) for i, m in enumerate(items))

    def append(self, module: Module) -> ModuleList:
        """Add module at the end; returns self."""
        self._renumber(self._items() + [module])
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        """Add each module at the end; returns self."""
        self._renumber(self._items() + list(modules))
        return self

    def insert(self, index: int, module: Module) -> None:
        """Put module before index."""
        items = self._items()
        items.insert(index, module)
        self._renumber(items)

    def __getitem__(self, index: int | slice) -> Any:
        items = self._items()
        return ModuleList(items[index]) if isinstance(index, slice) else items[index]

    def __setitem__(self, index: int, module: Module) -> None:
        items = self._items()
        items[index] = module
        self._renumber(items)

    def __delitem__(self, index: int | slice) -> None:
        items = self._items()
        del items[index]
        self._renumber(items)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._items())


class ModuleDict(Module):
    """A dict of name -> Module, registered as submodules under those names (insertion order).

        >>> from tg.nn import Linear
        >>> heads = ModuleDict({"cls": Linear(4, 3), "box": Linear(4, 4, bias=False)})
        >>> list(heads), list(heads.state_dict()), heads["box"].out_features
        (['cls', 'box'], ['cls.weight', 'cls.bias', 'box.weight'], 4)
    """

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        """Add or replace entries from a dict or (name, module) pairs."""
        pairs = modules.items() if isinstance(modules, Mapping) else modules
        for name, module in pairs:
            self[name] = module

    def __getitem__(self, name: str) -> Module:
        module = self._modules[name]
        assert module is not None
        return module

    def __setitem__(self, name: str, module: Module) -> None:
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f"[nn] ModuleDict: keys must be non-empty strs without '.', got {name!r}")
        if not isinstance(module, Module):
            raise TypeError(f"[nn] ModuleDict: expected a Module for {name!r}, got {type(module).__name__}")
        self._modules[name] = module

    def __delitem__(self, name: str) -> None:
        del self._modules[name]

    def __contains__(self, name: object) -> bool:
        return name in self._modules

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def keys(self) -> Iterable[str]:
        """The names, in insertion order."""
        return self._modules.keys()

    def values(self) -> Iterable[Module]:
        """The modules, in insertion order."""
        return [m for m in self._modules.values() if m is not None]

    def items(self) -> Iterable[tuple[str, Module]]:
        """(name, module) pairs, in insertion order."""
        return [(k, m) for k, m in self._modules.items() if m is not None]


def _to_arguments(args: tuple, kwargs: dict) -> tuple[Any, Any]:
    """(device, dtype) from Module.to's forms, either None when not given."""
    from tg.core.dtype import DType
    device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"[nn] Module.to: unexpected arguments {sorted(kwargs)}; expected device, dtype, "
                        f"non_blocking")
    for a in args:
        if isinstance(a, DType):
            dtype = a
        elif isinstance(a, Tensor):
            device, dtype = a.device, a.dtype
        elif a is not None:
            device = a
    if dtype is not None and not dtype.is_float:
        raise TypeError(f"[nn] Module.to only casts to a floating dtype (as torch), got {dtype}; cast the "
                        f"tensors you need yourself")
    return device, dtype
