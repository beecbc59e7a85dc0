"""One-liner families (a small model's level): arithmetic, string slices, element-wise maps, predicates.

Each still has a trap a first attempt can fall into (a negative input, a string shorter than n, a
bound that is included), and the visible edge case shows it.
"""

from __future__ import annotations

import random

from envs.code_tasks.spec import WORDS, Args, Family, Spec, ints, source

_ONE_ARG = "def {n}(x):\n    return {e}"


def _tag(value: int) -> str:
    """An integer as part of a Python name: -3 -> 'minus3'."""
    return f"minus{-value}" if value < 0 else str(value)


_TWO_ARGS = "def {n}(x, y):\n    return {e}"


def arith(rng: random.Random) -> Spec:
    """A small formula of one or two integers."""
    a, b, m = rng.choice([2, 3, 4, 5, -2, -3]), rng.choice([-5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 7]), rng.randint(3, 9)
    lo, hi = rng.randint(-5, 0), rng.randint(3, 10)
    form = rng.choice(["linear", "absdiff", "clamp", "round_down", "max_times"])
    forms = {
        "linear": (f"linear_{_tag(a)}x_{'plus' if b > 0 else 'minus'}{abs(b)}", _ONE_ARG, f"{a} * x + {b}",
                   f"Return {a} times x, plus {b}.", (f"{a} * (x + {b})", f"{a} * x + {abs(b)}"), ((0,), (-3,), (7,))),
        "absdiff": (f"distance_times_{abs(a)}", _TWO_ARGS, f"abs(x - y) * {abs(a)}",
                    f"Return the distance between x and y (never negative), times {abs(a)}.",
                    (f"(x - y) * {abs(a)}", f"abs(x) - abs(y) * {abs(a)}"), ((2, 9), (5, 5), (-4, 3))),
        "clamp": (f"clamp_{_tag(lo)}_{hi}", _ONE_ARG, f"min(max(x, {lo}), {hi})",
                  f"Return x limited to the range {lo}..{hi}: {lo} if x is below {lo}, {hi} if x is above {hi}, "
                  "else x.", (f"max(x, {lo})", f"min(x, {hi})", f"max(min(x, {lo}), {hi})"),
                  ((lo - 3,), (hi + 4,), (hi,))),
        "round_down": (f"round_down_to_{m}", _ONE_ARG, f"x // {m} * {m}",
                       f"Return the largest multiple of {m} that is less than or equal to x (x may be negative).",
                       (f"int(x / {m}) * {m}", f"round(x / {m}) * {m}"), ((-1,), (m,), (2 * m - 1,))),
        "max_times": (f"larger_times_{abs(a)}", _TWO_ARGS, f"max(x, y) * {abs(a)}",
                      f"Return the larger of x and y, multiplied by {abs(a)}.",
                      (f"x * {abs(a)}", f"max(x, y * {abs(a)})"), ((1, 8), (-2, -7), (4, 4))),
    }  # fmt: skip
    name, template, expr, doc, wrong, edges = forms[form]
    two = template == _TWO_ARGS
    return Spec(
        key=f"arith:{form}:{expr}",
        entry_point=name,
        params="x: int, y: int" if two else "x: int",
        returns="int",
        doc=doc,
        solution=source(template, n=name, e=expr),
        wrong=tuple(source(template, n=name, e=w) for w in wrong),
        edge_cases=edges,
        sample=lambda r: (r.randint(-12, 20), r.randint(-12, 20)) if two else (r.randint(-12, 20),),
    )


def slices(rng: random.Random) -> Spec:
    """A slice or repetition of a string: first/last n characters, dropping n, every k-th, repeat with a separator."""
    n, k = rng.randint(2, 4), rng.randint(2, 3)
    sep = rng.choice(["-", ", ", " ", "|"])
    form = rng.choice(["first", "last", "drop", "every", "repeat"])
    forms = {
        "first": (f"first_{n}_chars", f"s[:{n}]", f"Return the first {n} characters of s (all of s if it is shorter).",
                  (f"s[:{n - 1}]", f"s[{n}:]")),
        "last": (f"last_{n}_chars", f"s[-{n}:]", f"Return the last {n} characters of s (all of s if it is shorter).",
                 (f"s[len(s) - {n}:]", f"s[:{n}]")),
        "drop": (f"drop_first_{n}", f"s[{n}:]", f"Return s without its first {n} characters ('' if s is shorter).",
                 (f"s[{n - 1}:]", f"s[{n}:-1]")),
        "every": (f"every_{k}th_char", f"s[::{k}]",
                  f"Return every {k}th character of s, starting with the first one (index 0, {k}, {2 * k}, ...).",
                  (f"s[1::{k}]", f"s[{k - 1}::{k}]")),
        "repeat": (f"repeat_{n}_times", f"{sep!r}.join([s] * {n})",
                   f"Return s repeated {n} times with {sep!r} between the copies (not after the last one).",
                   (f"(s + {sep!r}) * {n}", f"s * {n}")),
    }  # fmt: skip
    name, expr, doc, wrong = forms[form]
    template = "def {n}(s):\n    return {e}"
    edges: tuple[Args, ...] = (("ab",), ("",), ("abcdefgh",), ("x",))
    return Spec(
        key=f"slices:{form}:{expr}",
        entry_point=name,
        params="s: str",
        returns="str",
        doc=doc,
        solution=source(template, n=name, e=expr),
        wrong=tuple(source(template, n=name, e=w) for w in wrong),
        edge_cases=edges,
        sample=lambda r: (r.choice(WORDS) + r.choice(["", "", r.choice(WORDS).lower()]),),
    )


def list_map(rng: random.Random) -> Spec:
    """Apply a small formula to every element of a list, keeping the order."""
    k = rng.randint(2, 5)
    form = rng.choice(["times", "plus", "square", "abs", "negate", "mod", "floordiv"])
    forms = {
        "times": (f"times_{k}", f"x * {k}", f"multiplied by {k}"),
        "plus": (f"plus_{k}", f"x + {k}", f"plus {k}"),
        "square": ("squares", "x * x", "squared"),
        "abs": ("absolute_values", "abs(x)", "made non-negative (its absolute value)"),
        "negate": ("negated", "-x", "with its sign flipped"),
        "mod": (f"mod_{k}", f"x % {k}", f"replaced by its remainder modulo {k} (Python's %, never negative)"),
        "floordiv": (f"div_{k}", f"x // {k}", f"divided by {k}, rounded down (Python's //)"),
    }
    name, expr, what = forms[form]
    body = "def {n}(xs):\n    return [{e} for x in xs{f}]"
    doc = f"Return a new list with every element of xs {what}, in the same order. An empty list gives []."
    wrong = (
        source(body, n=name, e=expr, f=" if x"),
        source("def {n}(xs):\n    return sorted({e} for x in xs)", n=name, e=expr),
        source(body, n=name, e=expr, f=" if x > 0"),
    )
    edges: tuple[Args, ...] = (([3, 0, -2],), ([],), ([-7, 5, -1, 2],))
    return Spec(
        key=f"list_map:{expr}",
        entry_point=name,
        params="xs: list[int]",
        returns="list[int]",
        doc=doc,
        solution=source(body, n=name, e=expr, f=""),
        wrong=wrong,
        edge_cases=edges,
        sample=lambda r: (ints(r, -9, 15, 1, 6),),
    )


def predicates(rng: random.Random) -> Spec:
    """True/False tests of one integer: parity, divisibility, ranges with included or excluded bounds."""
    m, lo, hi = rng.randint(2, 9), rng.randint(-5, 3), rng.randint(5, 12)
    form = rng.choice(["even", "odd", "divisible", "between", "outside", "positive"])
    forms = {
        "even": ("is_even", "x % 2 == 0", "x is even (0 and negative even numbers too)", ("x % 2 == 0 and x > 0",)),
        "odd": ("is_odd", "x % 2 == 1", "x is odd (negative odd numbers too)", ("x % 2 == 1 and x > 0", "x % 2 == -1")),
        "divisible": (f"divisible_by_{m}", f"x % {m} == 0", f"x is divisible by {m}",
                      (f"x % {m} != 0", f"x > 0 and x % {m} == 0")),
        "between": (f"between_{_tag(lo)}_and_{hi}", f"{lo} <= x <= {hi}",
                    f"{lo} <= x <= {hi} (both bounds included)",
                    (f"{lo} < x < {hi}", f"{lo} <= x < {hi}", f"x <= {hi}", f"x >= {lo}")),
        "outside": (f"outside_{_tag(lo)}_to_{hi}", f"x < {lo} or x > {hi}",
                    f"x is outside the range {lo}..{hi} (the bounds themselves are inside)",
                    (f"x <= {lo} or x >= {hi}", f"x < {lo} and x > {hi}", f"x > {lo} or x < {hi}")),
        "positive": ("is_positive", "x > 0", "x is strictly positive (0 is not)", ("x >= 0",)),
    }  # fmt: skip
    name, expr, what, wrong = forms[form]
    # A range's revealing examples come first: for `between` a value below the range (a draft that checks only
    # the upper bound, the commonest first attempt, fails it), then the lower bound (the True example that
    # mixed_visible swaps in; an excluded bound fails it); for `outside` one inside (its answer, False, differs
    # from most sampled inputs', so the examples show both answers and an always-True draft fails).
    first: tuple[Args, ...] = {"between": ((lo - 2,), (lo,)), "outside": (((lo + hi) // 2,),)}.get(form, ())
    edges: tuple[Args, ...] = (*first, (0,), (lo,), (hi,), (-m,), (m * 2,), (-3,))  # build.py drops repeats
    return Spec(
        key=f"predicates:{expr}",
        entry_point=name,
        params="x: int",
        returns="bool",
        doc=f"Return True if {what}, else False.",
        solution=source(_ONE_ARG, n=name, e=expr),
        wrong=tuple(source(_ONE_ARG, n=name, e=w) for w in wrong),
        edge_cases=edges,
        sample=lambda r: (r.randint(-15, 25),),
        mixed_visible=True,
    )


FAMILIES = (
    Family("arith", "basics", arith),
    Family("slices", "basics", slices),
    Family("list_map", "basics", list_map),
    Family("predicates", "basics", predicates),
)
