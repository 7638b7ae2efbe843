"""A small symbolic algebra for index expressions.

Every expression is kept as a linear form: integer coefficients over nonlinear *atoms*
(variables, floor-divisions, modulos, comparisons) plus a constant. Division and modulo split
off whatever is divisible, and use the known range of each atom to drop what cannot matter, so
views over views still render as clean code:

    >>> i, j = Var("i", 0, 9), Var("j", 0, 3)
    >>> ((i * 4 + j) // 4).render(), ((i * 4 + j) % 4).render()
    ('i', 'j')
"""
from __future__ import annotations

import math
from typing import Any, Callable, Generic, TypeVar, Union

IntLike = Union["Node", int]
T = TypeVar("T")


class cached_property(Generic[T]):  # noqa: N801  (named after the functools one it replaces)
    """functools.cached_property without its lock: Python 3.11 takes an RLock on every first read,
    which made it the costliest line of building a graph (every view and kernel node reads its key
    once). Computes on the first read and stores the value in the instance's __dict__, which later
    reads find first."""

    def __init__(self, fn: Callable[[Any], T]):
        self.fn, self.name, self.__doc__ = fn, fn.__name__, fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> T:
        if obj is None:
            return self  # type: ignore[return-value]
        value = obj.__dict__[self.name] = self.fn(obj)
        return value


class Node:
    """Base of all index expressions. Subclasses are immutable and compare by structure."""
    min: int
    max: int

    # --- construction helpers (all simplify) ---
    def __add__(self, other: IntLike) -> Node:
        return add(self, other)

    __radd__ = __add__

    def __sub__(self, other: IntLike) -> Node:
        return add(self, mul(to_node(other), -1))

    def __rsub__(self, other: IntLike) -> Node:
        return add(to_node(other), mul(self, -1))

    def __neg__(self) -> Node:
        return mul(self, -1)

    def __mul__(self, other: int) -> Node:
        return mul(self, other)

    __rmul__ = __mul__

    def __floordiv__(self, other: int) -> Node:
        return div(self, other)

    def __mod__(self, other: int) -> Node:
        return mod(self, other)

    def lt(self, c: int) -> Node:
        return lt(self, c)

    def ge(self, c: int) -> Node:
        return ge(self, c)

    # --- inspection ---
    @property
    def is_const(self) -> bool:
        return self.min == self.max

    def vars(self) -> set[Var]:
        raise NotImplementedError

    def render(self) -> str:
        return self.text

    @cached_property
    def text(self) -> str:
        """The expression as C source, made once per node: a node is immutable, and simplifying sorts
        terms by their text (a kernel's lowering read it about a million times)."""
        raise NotImplementedError

    def eval(self, env: dict[str, Any]) -> Any:
        """Evaluate with Python ints or numpy integer arrays bound to the variable names."""
        raise NotImplementedError

    def substitute(self, sub: dict[Var, Node]) -> Node:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{self.render()} in [{self.min}, {self.max}]>"

    def __hash__(self) -> int:
        return self.hashed

    @cached_property
    def hashed(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and self.key == other.key

    @cached_property
    def key(self) -> tuple:
        raise NotImplementedError


class Var(Node):
    def __init__(self, name: str, lo: int, hi: int):
        assert lo <= hi, f"empty range for {name}: [{lo}, {hi}]"
        self.name, self.min, self.max = name, lo, hi

    @cached_property
    def key(self) -> tuple:
        return ("var", self.name, self.min, self.max)

    def vars(self) -> set[Var]:
        return {self}

    def render(self) -> str:
        return self.name

    @property
    def text(self) -> str:   # type: ignore[override]
        return self.name

    def eval(self, env: dict[str, Any]) -> Any:
        return env[self.name]

    def substitute(self, sub: dict[Var, Node]) -> Node:
        return sub.get(self, self)


class Lin(Node):
    """sum(coeff * atom) + const. Never holds a Lin as an atom."""

    def __init__(self, terms: tuple[tuple[Node, int], ...], const: int):
        self.terms, self.const = terms, const
        lo = hi = const
        for atom, c in terms:
            lo += c * (atom.min if c > 0 else atom.max)
            hi += c * (atom.max if c > 0 else atom.min)
        self.min, self.max = lo, hi

    @cached_property
    def key(self) -> tuple:
        return ("lin", tuple((a.key, c) for a, c in self.terms), self.const)

    def vars(self) -> set[Var]:
        return set().union(*(a.vars() for a, _ in self.terms)) if self.terms else set()

    @cached_property
    def text(self) -> str:
        if not self.terms:
            return str(self.const)
        parts = []
        for atom, c in self.terms:
            s = atom.render()
            parts.append(s if c == 1 else f"({s}*{c})")
        out = "+".join(parts)
        if self.const:
            out += f"+{self.const}" if self.const > 0 else f"-{-self.const}"
        return f"({out})"

    def eval(self, env: dict[str, Any]) -> Any:
        out: Any = self.const
        for atom, c in self.terms:
            out = out + atom.eval(env) * c
        return out

    def substitute(self, sub: dict[Var, Node]) -> Node:
        out: Node = num(self.const)
        for atom, c in self.terms:
            out = add(out, mul(atom.substitute(sub), c))
        return out


class _Atom2(Node):
    """An atom with one sub-expression and one integer (div, mod, lt, ge)."""
    sym = ""

    def __init__(self, a: Node, b: int):
        self.a, self.b = a, b
        self.min, self.max = self._range()

    def _range(self) -> tuple[int, int]:
        raise NotImplementedError

    @cached_property
    def key(self) -> tuple:
        return (type(self).__name__, self.a.key, self.b)

    def vars(self) -> set[Var]:
        return self.a.vars()

    @cached_property
    def text(self) -> str:
        return f"({self.a.render()}{self.sym}{self.b})"


class Div(_Atom2):
    sym = "/"

    def _range(self) -> tuple[int, int]:
        return self.a.min // self.b, self.a.max // self.b

    def eval(self, env: dict[str, Any]) -> Any:
        return self.a.eval(env) // self.b

    def substitute(self, sub: dict[Var, Node]) -> Node:
        return div(self.a.substitute(sub), self.b)


class Mod(_Atom2):
    sym = "%"

    def _range(self) -> tuple[int, int]:
        return 0, self.b - 1

    def eval(self, env: dict[str, Any]) -> Any:
        return self.a.eval(env) % self.b

    def substitute(self, sub: dict[Var, Node]) -> Node:
        return mod(self.a.substitute(sub), self.b)


class Lt(_Atom2):
    sym = "<"

    def _range(self) -> tuple[int, int]:
        return 0, 1

    def eval(self, env: dict[str, Any]) -> Any:
        return self.a.eval(env) < self.b

    def substitute(self, sub: dict[Var, Node]) -> Node:
        return lt(self.a.substitute(sub), self.b)


class Ge(_Atom2):
    sym = ">="

    def _range(self) -> tuple[int, int]:
        return 0, 1

    def eval(self, env: dict[str, Any]) -> Any:
        return self.a.eval(env) >= self.b

    def substitute(self, sub: dict[Var, Node]) -> Node:
        return ge(self.a.substitute(sub), self.b)


class And(Node):
    def __init__(self, nodes: tuple[Node, ...]):
        self.nodes = nodes
        self.min, self.max = 0, 1

    @cached_property
    def key(self) -> tuple:
        return ("and", tuple(n.key for n in self.nodes))

    def vars(self) -> set[Var]:
        return set().union(*(n.vars() for n in self.nodes))

    @cached_property
    def text(self) -> str:
        return "(" + "&&".join(n.render() for n in self.nodes) + ")"

    def eval(self, env: dict[str, Any]) -> Any:
        out: Any = True
        for n in self.nodes:
            out = out & n.eval(env)
        return out

    def substitute(self, sub: dict[Var, Node]) -> Node:
        return ands([n.substitute(sub) for n in self.nodes])


# ---------------------------------------------------------------- simplifying constructors

def num(c: int) -> Node:
    return Lin((), int(c))


def to_node(x: IntLike) -> Node:
    return x if isinstance(x, Node) else num(x)


def _linear(x: Node) -> tuple[dict[Node, int], int]:
    if isinstance(x, Lin):
        return dict(x.terms), x.const
    return {x: 1}, 0


def _from_linear(terms: dict[Node, int], const: int) -> Node:
    items = tuple(sorted(((a, c) for a, c in terms.items() if c != 0), key=lambda t: t[0].text))
    if len(items) == 1 and items[0][1] == 1 and const == 0:
        return items[0][0]
    return Lin(items, const)


def add(a: IntLike, b: IntLike) -> Node:
    ta, ca = _linear(to_node(a))
    tb, cb = _linear(to_node(b))
    for atom, c in tb.items():
        ta[atom] = ta.get(atom, 0) + c
    return _from_linear(ta, ca + cb)


def mul(a: IntLike, c: int) -> Node:
    assert isinstance(c, int), f"index expressions multiply by ints only, got {c!r}"
    terms, const = _linear(to_node(a))
    return _from_linear({k: v * c for k, v in terms.items()}, const * c)


def _gcd_all(terms: dict[Node, int], const: int, b: int) -> int:
    g = b
    for c in terms.values():
        g = math.gcd(g, c)
    return math.gcd(g, const)


def div(a: IntLike, b: int) -> Node:
    """Floor division by a positive int."""
    a = to_node(a)
    assert b > 0, f"index division by {b}"
    if b == 1:
        return a
    if a.min // b == a.max // b:
        return num(a.min // b)
    if isinstance(a, Div):
        return div(a.a, a.b * b)
    terms, const = _linear(a)
    split = _split_below(terms, const, b)
    if split is not None:
        big, _, c = split
        return div(big, b // c)
    quotient = {k: c // b for k, c in terms.items() if c % b == 0}
    rest = {k: c for k, c in terms.items() if c % b != 0}
    q_const, r_const = divmod(const, b)
    g = _gcd_all(rest, r_const, b)
    rest_node = _from_linear({k: c // g for k, c in rest.items()}, r_const // g)
    bb = b // g
    if rest_node.min // bb == rest_node.max // bb:
        rest_q: Node = num(rest_node.min // bb)
    elif bb == 1:
        rest_q = rest_node
    elif rest_node.min < 0:
        # C's / truncates toward zero; keep the atom's argument non-negative so it floors:
        # (r + k*b) // b - k == r // b
        k = -(rest_node.min // bb)
        rest_q = add(Div(add(rest_node, k * bb), bb), -k)
    else:
        rest_q = Div(rest_node, bb)
    return add(_from_linear(quotient, q_const), rest_q)


def _split_below(terms: dict[Node, int], const: int, b: int) -> tuple[Node, Node, int] | None:
    """(B, s, c) when a = c * B + s with c > 1 dividing b and s in [0, c): then a // b is B // (b / c)
    and a % b is c * (B % (b / c)) + s (a row index times a width, plus a column below the width).
    None when there is no such split with a non-zero s."""
    for c in sorted({k for k in terms.values() if 1 < k and b % k == 0}, reverse=True):
        rest = {t: k for t, k in terms.items() if k % c}
        small = _from_linear(rest, const % c)
        if (rest or const % c) and 0 <= small.min and small.max < c:
            return _from_linear({t: k // c for t, k in terms.items() if k % c == 0}, const // c), small, c
    return None


def mod(a: IntLike, b: int) -> Node:
    """Floor modulo by a positive int."""
    a = to_node(a)
    assert b > 0, f"index modulo by {b}"
    if b == 1:
        return num(0)
    if 0 <= a.min and a.max < b:
        return a
    if a.is_const:
        return num(a.min % b)
    if isinstance(a, Mod) and a.b % b == 0:
        return mod(a.a, b)
    terms, const = _linear(a)
    split = _split_below(terms, const, b)
    if split is not None:
        big, small, c = split
        return add(mul(mod(big, b // c), c), small)
    terms = {k: c % b for k, c in terms.items() if c % b}
    const %= b
    g = _gcd_all(terms, const, b)
    inner = _from_linear({k: c // g for k, c in terms.items()}, const // g)
    bb = b // g
    if 0 <= inner.min and inner.max < bb:
        return mul(inner, g)
    if inner.min // bb == inner.max // bb:  # no wrap-around inside the range
        return mul(add(inner, -(inner.min // bb) * bb), g)
    if inner.min < 0:   # C's % keeps the dividend's sign: shift the argument non-negative first
        inner = add(inner, -(inner.min // bb) * bb)
    return mul(Mod(inner, bb), g)


def lt(a: IntLike, c: int) -> Node:
    a = to_node(a)
    if a.max < c:
        return num(1)
    if a.min >= c:
        return num(0)
    terms, const = _linear(a)
    if terms and const:  # move the constant across: x + k < c  <=>  x < c - k
        return lt(_from_linear(terms, 0), c - const)
    g = _gcd_all(terms, 0, 0) if terms else 1
    if g > 1:  # g*x < c  <=>  x < ceil(c/g)
        return lt(_from_linear({k: v // g for k, v in terms.items()}, 0), -(-c // g))
    split = _split_below(terms, 0, c) if c > 0 else None
    if split is not None:  # w*row + col < w*m with col in [0, w)  <=>  row < m
        return lt(split[0], c // split[2])
    return Lt(a, c)


def ge(a: IntLike, c: int) -> Node:
    a = to_node(a)
    if a.min >= c:
        return num(1)
    if a.max < c:
        return num(0)
    terms, const = _linear(a)
    if terms and const:
        return ge(_from_linear(terms, 0), c - const)
    g = _gcd_all(terms, 0, 0) if terms else 1
    if g > 1:  # g*x >= c  <=>  x >= ceil(c/g)
        return ge(_from_linear({k: v // g for k, v in terms.items()}, 0), -(-c // g))
    split = _split_below(terms, 0, c) if c > 0 else None
    if split is not None:  # w*row + col >= w*m with col in [0, w)  <=>  row >= m
        return ge(split[0], c // split[2])
    return Ge(a, c)


def _bound(bounds: dict[Node, list[int]], order: list[tuple[bool, Node]], m: Ge | Lt) -> bool:
    """Narrow m.a's range in bounds by m (entering m.a in order the first time); False when the range
    holds nothing."""
    lohi = bounds.get(m.a)
    if lohi is None:
        lohi = bounds[m.a] = [m.a.min, m.a.max + 1]
        order.append((True, m.a))
    if isinstance(m, Ge):
        lohi[0] = max(lohi[0], m.b)
    else:
        lohi[1] = min(lohi[1], m.b)
    return lohi[0] < lohi[1]


def _range_of(e: Node, lo: int, hi: int) -> list[Node]:
    """The bounds that say e is in [lo, hi), less those e's own range implies."""
    return ([Ge(e, lo)] if lo > e.min else []) + ([Lt(e, hi)] if hi <= e.max else [])


def ands(nodes: list[Node]) -> Node:
    """The conjunction of nodes, each expression's bounds merged into one range: `e >= lo` and `e < hi`
    keep the tightest of each, a range that holds nothing is 0 (a pad's mask read through a stride:
    2*r+1 in [2, 3) became (r>=1)&&(r<1), and each such dead load stayed in the kernel's source), and a
    bound e's own range implies is dropped."""
    order: list[tuple[bool, Node]] = []     # (True, e): e's merged bounds go here; (False, m): m itself
    bounds: dict[Node, list[int]] = {}      # e -> [lo, hi]: what the Ge/Lt terms on e allow
    for n in nodes:
        if n.is_const:
            if n.min == 0:
                return num(0)
            continue
        for m in (n.nodes if isinstance(n, And) else (n,)):
            if not isinstance(m, (Ge, Lt)):
                if (False, m) not in order:
                    order.append((False, m))
            elif not _bound(bounds, order, m):
                return num(0)
    out = [c for is_bound, m in order for c in (_range_of(m, *bounds[m]) if is_bound else (m,))]
    if not out:
        return num(1)
    return out[0] if len(out) == 1 else And(tuple(out))


def affine_coeffs(x: Node, variables: list[Var]) -> tuple[list[int], int] | None:
    """If x is sum(c_i * v_i) + const over the given variables, the (c_i, const); else None."""
    terms, const = _linear(x)
    coeffs = [0] * len(variables)
    index = {v: i for i, v in enumerate(variables)}
    for atom, c in terms.items():
        if not isinstance(atom, Var) or atom not in index:
            return None
        coeffs[index[atom]] += c
    return coeffs, const
