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


def test_a_row_times_a_width_plus_a_column_splits():
    """(c*B + s) with s in [0, c) and c dividing b: // b and % b go to B and s, exactly, including
    a negative row part and a constant column."""
    g, lane = Var("g", 0, 11), Var("lane", 0, 15)
    assert ((g * 16 + lane) // 32).render() == "(g/2)"
    assert ((g * 16 + lane) % 32).render() in ("(((g%2)*16)+lane)", "(lane+((g%2)*16))")
    for ca, cb, c0, d in [(16, 1, 0, 32), (16, 1, 3, 64), (8, 1, -40, 32), (32, 2, 5, 64), (12, 1, 0, 24)]:
        a, b = Var("a", -3 if c0 < 0 else 0, 11), Var("b", 0, 7)
        _check_linear_expressions(a, b, ca, cb, c0, d)


def test_loads_assume_the_bounds_their_validity_sets():
    """A masked load's index is simplified on the loop ranges its mask leaves (never the lane's), and
    agrees with the full index wherever the mask holds."""
    from tg.core.codegen.linearizer import narrowed
    from tg.core.symbolic import ands
    g0, g1, g2, lane = Var("g0", 0, 7), Var("g1", 0, 63), Var("g2", 0, 11), Var("lane", 0, 15)
    x = g2 * 16 + lane
    assert narrowed(((g1 * 64 + x) // 4096 + g0) % 8, x.lt(64), lane).render() == "g0"
    idx = ((((g1 * 64 + x) // 4096 + g0) % 8) * 4096 + ((x // 64 + g1) % 64) * 32 + ((x // 32) % 2) * 2048
           + x % 32)
    for valid in (x.lt(64), ands([x.ge(64), x.lt(128)])):
        short = narrowed(idx, valid, lane)
        assert "lane" in short.render() and len(short.render()) < len(idx.render())
        for values in itertools.product(range(8), range(0, 64, 7), range(12), range(16)):
            env = dict(zip(("g0", "g1", "g2", "lane"), values))
            if valid.eval(env):
                assert short.eval(env) == idx.eval(env), (values, short.render())


def test_bounds_on_a_row_and_column_become_bounds_on_the_row():
    g, lane = Var("g", 0, 11), Var("lane", 0, 15)
    assert (g * 16 + lane).lt(64).render() == "(g<4)" and (g * 16 + lane).ge(64).render() == "(g>=4)"
    for ca, cb, d in [(16, 1, 64), (8, 1, 24), (16, 3, 48), (6, 1, 36)]:
        a, b = Var("a", 0, 11), Var("b", 0, 5)
        brute((a * ca + b * cb).lt(d), [a, b], lambda x, y, ca=ca, cb=cb, d=d: int(x * ca + y * cb < d))
        brute((a * ca + b * cb).ge(d), [a, b], lambda x, y, ca=ca, cb=cb, d=d: int(x * ca + y * cb >= d))


def test_conjunctions_merge_bounds_and_fold_empty_ranges():
    """ands keeps one range per expression (the tightest lower and upper bound), folds a range holding
    nothing to 0, and is exact: generated bounds on generated linear expressions, brute-forced. The
    case that made dead loads: a pad's mask 2r+1 in [2, 3) read through a stride, r in [0, 1]."""
    from tg.core.symbolic import ands
    r = Var("r", 0, 1)
    assert ands([(r * 2 + 1).ge(2), (r * 2 + 1).lt(3)]).render() == "0"
    a, b = Var("a", 0, 6), Var("b", 0, 4)
    rng = random.Random(5)
    for _ in range(300):
        exprs = [a * rng.randint(-3, 4) + b * rng.randint(-3, 4) + rng.randint(-4, 4) for _ in range(2)]
        terms, want = [], []
        for _ in range(rng.randint(1, 5)):
            e, c, upper = rng.choice(exprs), rng.randint(-10, 20), rng.random() < 0.5
            terms.append(e.lt(c) if upper else e.ge(c))
            want.append((e, c, upper))
        got = ands(terms)
        brute(got, [a, b], lambda x, y, want=want: int(all(
            (e.eval({"a": x, "b": y}) < c) == upper for e, c, upper in want)))
        # at most one lower and one upper bound per expression remain
        atoms = getattr(got, "nodes", (got,))
        kinds = [(type(n).__name__, n.a.key) for n in atoms if hasattr(n, "a")]
        assert len(kinds) == len(set(kinds)), got.render()
