"""The index algebra simplifies and stays exact (checked by brute-force evaluation)."""
import itertools
import random

from tg.core.symbolic import Var, num


def brute(expr, variables, fn):
    for values in itertools.product(*[range(v.min, v.max + 1) for v in variables]):
        env = {v.name: x for v, x in zip(variables, values)}
        assert expr.eval(env) == fn(*values), (expr.render(), values)


def test_div_mod_of_aligned_sum():
    i, j = Var("i", 0, 9), Var("j", 0, 3)
    assert ((i * 4 + j) // 4).render() == "i"
    assert ((i * 4 + j) % 4).render() == "j"
    assert ((i * 4 + j) // 2).render() in ("((j/2)+(i*2))", "((i*2)+(j/2))")


def test_ranges():
    i = Var("i", 0, 9)
    e = i * 3 - 2
    assert (e.min, e.max) == (-2, 25)
    assert (i // 4).max == 2 and (i % 4).max == 3


def test_comparisons_fold():
    i = Var("i", 0, 9)
    assert i.lt(10).render() == "1" and i.ge(0).render() == "1" and i.lt(0).render() == "0"
    assert (i * 2).lt(5).render() == "(i<3)"


def _check_linear_expressions(a, b, ca, cb, c0, d):
    lin = a * ca + b * cb + c0
    brute(lin // d, [a, b], lambda x, y: (x * ca + y * cb + c0) // d)
    brute(lin % d, [a, b], lambda x, y: (x * ca + y * cb + c0) % d)
    brute((lin // d) % 3, [a, b], lambda x, y: ((x * ca + y * cb + c0) // d) % 3)
    brute(lin.lt(d), [a, b], lambda x, y: int(x * ca + y * cb + c0 < d))


def test_random_expressions_are_exact():
    rng = random.Random(0)
    a, b = Var("a", 0, 6), Var("b", 0, 4)
    for _ in range(200):
        ca, cb, c0 = rng.randint(-5, 9), rng.randint(-5, 9), rng.randint(-7, 7)
        d = rng.randint(1, 8)
        _check_linear_expressions(a, b, ca, cb, c0, d)


def test_substitute():
    i, j = Var("i", 0, 9), Var("j", 0, 9)
    assert (i * 2 + j).substitute({j: num(3)}).render() == "((i*2)+3)"
