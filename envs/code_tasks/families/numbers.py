"""Number families: digit statistics, counting multiples in a range, FizzBuzz variants."""

from __future__ import annotations

import random

from envs.code_tasks.spec import Args, Family, Spec, source

_DIGIT_STATS = {
    "sum": ("sum(int(d) for d in digits)", "the sum of the digits of n"),
    "even": ("sum(1 for d in digits if int(d) % 2 == 0)", "how many digits of n are even (0 is even)"),
    "odd": ("sum(1 for d in digits if int(d) % 2 == 1)", "how many digits of n are odd"),
    "max": ("max(int(d) for d in digits)", "the largest digit of n"),
    "squares": ("sum(int(d) ** 2 for d in digits)", "the sum of the squares of the digits of n"),
}


def _number_with(rng: random.Random, digit: str) -> int:
    """A signed integer of 1-6 digits in which ``digit`` is more frequent than chance."""
    digits = "".join(rng.choice("0123456789" + digit * 3) for _ in range(rng.randint(1, 6)))
    return rng.choice([1, -1]) * int(digits)


def digit_stat(rng: random.Random) -> Spec:
    """A statistic of the decimal digits of an integer that may be negative or zero."""
    stat = rng.choice([*sorted(_DIGIT_STATS), "count", "count", "above"])
    d, t = rng.randint(0, 9), rng.randint(2, 7)
    if stat == "count":
        expr, what, name = f"digits.count({str(d)!r})", f"how many times the digit {d} appears in n", f"count_digit_{d}"
    elif stat == "above":
        expr, what, name = (
            f"sum(int(d) for d in digits if int(d) > {t})",
            f"the sum of the digits of n that are greater than {t}",
            f"sum_digits_above_{t}",
        )
    else:
        expr, what = _DIGIT_STATS[stat]
        name = {"sum": "digit_sum", "even": "count_even_digits", "odd": "count_odd_digits", "max": "max_digit"}.get(
            stat, "digit_square_sum"
        )
    body = "def {n}(n):\n    digits = str({a})\n    return {e}"
    doc = f"Return {what}. n may be negative (ignore the minus sign) or 0 (which has the single digit 0)."
    loop_digits = (
        "def {n}(n):\n    found = []\n    while n > 0:\n        found.append(str(n % 10))\n        n //= 10\n"
        "    digits = ''.join(reversed(found))\n    return {e}"
    )
    wrong = (source(body, n=name, a="n", e=expr), source(loop_digits, n=name, e=expr))
    edges: tuple[Args, ...] = ((-4072,), (0,), (10,), (-9,), (90817,))
    return Spec(
        key=f"digit_stat:{name}",
        entry_point=name,
        params="n: int",
        returns="int",
        doc=doc,
        solution=source(body, n=name, a="abs(n)", e=expr),
        wrong=wrong,
        edge_cases=edges,
        sample=lambda r: (_number_with(r, str(d)),),
    )


def count_multiples(rng: random.Random) -> Spec:
    """Count the integers of a range (inclusive or not) that satisfy a divisibility rule."""
    a, b = rng.sample([2, 3, 4, 5, 6, 7, 9], 2)
    rule = rng.choice(["div", "div", "not", "or", "and_not"])
    inclusive = rng.random() < 0.6
    cond, what, bug = {
        "div": (f"x % {a} == 0", f"divisible by {a}", f"x % {a} == 0 and x != 0"),
        "not": (f"x % {a} != 0", f"not divisible by {a}", f"x % {a} != 0 and x % {b} != 0"),
        "or": (f"x % {a} == 0 or x % {b} == 0", f"divisible by {a} or by {b} (or both)", f"x % {a * b} == 0"),
        "and_not": (f"x % {a} == 0 and x % {b} != 0", f"divisible by {a} but not by {b}", f"x % {a} == 0"),
    }[rule]
    top = "hi + 1" if inclusive else "hi"
    name = {"div": f"count_multiples_of_{a}", "not": f"count_non_multiples_of_{a}"}.get(rule, f"count_{rule}_{a}_{b}")
    body = "def {n}(lo, hi):\n    return sum(1 for x in range(lo, {top}) if {c})"
    bounds = "from lo to hi (both included)" if inclusive else "from lo (included) up to hi (excluded)"
    doc = f"Return how many integers x {bounds} are {what}. If the range is empty, return 0."
    wrong = (
        source(body, n=name, top="hi" if inclusive else "hi + 1", c=cond),
        source(body, n=name, top=top, c=bug),
        source(body, n=name, top=top.replace("hi", "hi - 1") if not inclusive else "hi", c=cond),
    )
    m = a * b
    edges: tuple[Args, ...] = ((m, m), (9, 3), (0, 0), (-m, m), (1, a))
    return Spec(
        key=f"count_multiples:{cond}:{inclusive}",
        entry_point=name,
        params="lo: int, hi: int",
        returns="int",
        doc=doc,
        solution=source(body, n=name, top=top, c=cond),
        wrong=tuple(dict.fromkeys(wrong)),
        edge_cases=edges,
        sample=lambda r: tuple(sorted((r.randint(-10, 40), r.randint(-10, 40)))),
    )


_WORD_PAIRS = (("Fizz", "Buzz"), ("Foo", "Bar"), ("Ping", "Pong"), ("Tic", "Tac"), ("Hip", "Hop"), ("Zig", "Zag"))


def fizzbuzz(rng: random.Random) -> Spec:
    """FizzBuzz with other divisors and words, returning the list of strings for 1..n."""
    a, b = sorted(rng.sample([2, 3, 5], 2))
    w1, w2 = rng.choice(_WORD_PAIRS)
    name = f"{w1.lower()}_{w2.lower()}"
    checks = [(f"i % {a * b} == 0", w1 + w2), (f"i % {a} == 0", w1), (f"i % {b} == 0", w2)]

    def body(order: list[tuple[str, str]], start: str = "1, n + 1", last: str = "str(i)") -> str:
        lines = [f"def {name}(n):", "    out = []", f"    for i in range({start}):"]
        for index, (test, word) in enumerate(order):
            lines += [f"        {'if' if index == 0 else 'elif'} {test}:", f"            out.append({word!r})"]
        lines += ["        else:", f"            out.append({last})", "    return out"]
        return "\n".join(lines) + "\n"

    doc = (
        f"Return a list of strings for the numbers 1 to n (n included): {w1 + w2!r} for multiples of both {a} and "
        f"{b}, {w1!r} for the other multiples of {a}, {w2!r} for the other multiples of {b}, and the number itself "
        "(as a string) otherwise. n = 0 gives []."
    )
    wrong = (body(checks[1:] + checks[:1]), body(checks, start="n"), body(checks, last="i"), body(checks, "1, n"))
    edges: tuple[Args, ...] = ((a * b,), (0,), (1,), (b,))
    return Spec(
        key=f"fizzbuzz:{a}:{b}:{w1}",
        entry_point=name,
        params="n: int",
        returns="list[str]",
        doc=doc,
        solution=body(checks),
        wrong=wrong,
        edge_cases=edges,
        sample=lambda r: (r.randint(2, a * b + 2),),
    )


FAMILIES = (
    Family("digit_stat", "numbers", digit_stat),
    Family("count_multiples", "numbers", count_multiples),
    Family("fizzbuzz", "numbers", fizzbuzz),
)
