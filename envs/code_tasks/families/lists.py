"""List families: aggregate a filtered list, k-th value, sliding windows, de-duplication."""

from __future__ import annotations

import random

from envs.code_tasks.spec import WORDS, Args, Family, Spec, ints, source


def _predicate(rng: random.Random) -> tuple[str, str, str, str]:
    """(condition, description, plausible buggy condition, key) on an element x."""
    k, m = rng.randint(-2, 6), rng.randint(2, 5)
    tag = f"minus{-k}" if k < 0 else str(k)
    return rng.choice(
        [
            (f"x > {k}", f"greater than {k}", f"x >= {k}", f"gt{tag}"),
            (f"x >= {k}", f"greater than or equal to {k}", f"x > {k}", f"ge{tag}"),
            (f"x < {k}", f"less than {k}", f"x <= {k}", f"lt{tag}"),
            (f"x % {m} == 0", f"divisible by {m}", f"x % {m} == 0 and x != 0", f"div{m}"),
            ("x % 2 == 1", "odd (negative odd numbers too)", "x % 2 == 1 and x > 0", "odd"),
            ("x < 0", "negative", "x <= 0", "neg"),
        ]
    )


def filter_agg(rng: random.Random) -> Spec:
    """Sum, count, max or min of the elements that satisfy a condition (None when there are none)."""
    cond, cond_doc, bug, cond_key = _predicate(rng)
    agg = rng.choice(["sum", "count", "max", "min"])
    name = {"sum": "sum_of", "count": "count_of", "max": "largest_of", "min": "smallest_of"}[agg] + "_" + cond_key
    kept = f"[x for x in xs if {cond}]"
    if agg in ("sum", "count"):
        expr = "sum(kept)" if agg == "sum" else "len(kept)"
        doc = f"Return the {'sum' if agg == 'sum' else 'number'} of the elements of xs that are {cond_doc}."
        doc += " An empty list gives 0."
        body = "def {n}(xs):\n    kept = {kept}\n    return {e}"
        wrong = (source(body, n=name, kept=kept.replace(cond, bug), e=expr),)
    else:
        expr = f"{agg}(kept) if kept else None"
        doc = f"Return the {'largest' if agg == 'max' else 'smallest'} element of xs that is {cond_doc}"
        doc += ", or None if there is no such element."
        body = "def {n}(xs):\n    kept = {kept}\n    return {e}"
        wrong = (
            source(body, n=name, kept=kept.replace(cond, bug), e=expr),
            source(body, n=name, kept=kept, e=f"{agg}(kept)"),
            source(body, n=name, kept=kept, e=f"{agg}(kept) if kept else 0"),
        )
    edges: tuple[Args, ...] = ([],), ([0, 0, 5],), ([-3, -1, 2, 6, 6],), ([-4, -3, -2, -1, 0, 1, 2, 3],)
    return Spec(
        key=f"filter_agg:{cond}:{agg}",
        entry_point=name,
        params="xs: list[int]",
        returns="int" if agg in ("sum", "count") else "int | None",
        doc=doc,
        solution=source(body, n=name, kept=kept, e=expr),
        wrong=wrong,
        edge_cases=edges,
        sample=lambda r: (ints(r, -6, 12, 1, 7),),
    )


_ORDINALS = {1: "", 2: "second ", 3: "third ", 4: "fourth "}


def kth_value(rng: random.Random) -> Spec:
    """The k-th largest or smallest value, counting repeated values once or not; a marker when too short."""
    k = rng.randint(1, 4)
    largest = rng.random() < 0.5
    distinct = rng.random() < 0.6
    missing = rng.choice(["None", "-1"])
    word = "largest" if largest else "smallest"
    name = f"{_ORDINALS[k].strip() + '_' if k > 1 else ''}{word}" + ("_distinct" if distinct else "")
    values = "sorted(set(xs)" if distinct else "sorted(xs"
    order = ", reverse=True)" if largest else ")"
    body = "def {n}(xs):\n    values = {v}{o}\n    if len(values) < {k}:\n        return {m}\n    return values[{i}]"
    doc = (
        f"Return the {_ORDINALS[k]}{word} value in xs"
        + (" counting equal values once (as distinct values)" if distinct else " (equal values count separately)")
        + f". Return {missing} if xs has fewer than {k} {'distinct ' if distinct else ''}value{'s' if k > 1 else ''}."
    )
    wrong = [
        source(body, n=name, v="sorted(xs" if distinct else "sorted(set(xs)", o=order, k=k, m=missing, i=k - 1),
        source("def {n}(xs):\n    values = {v}{o}\n    return values[{i}]", n=name, v=values, o=order, i=k - 1),
        source(body, n=name, v=values, o=")" if largest else ", reverse=True)", k=k, m=missing, i=k - 1),
        source(body, n=name, v=values, o=order, k=k, m=missing, i=k),
    ]
    edges: tuple[Args, ...] = ([],), ([5, 5, 5, 5],), ([3, 9, 9, 1, 1, 4],), ([2, -7],), ([8, 6, 6, 7, 6, 8],)
    return Spec(
        key=f"kth_value:{k}:{largest}:{distinct}:{missing}",
        entry_point=name,
        params="xs: list[int]",
        returns="int | None" if missing == "None" else "int",
        doc=doc,
        solution=source(body, n=name, v=values, o=order, k=k, m=missing, i=k - 1),
        wrong=tuple(wrong),
        edge_cases=edges,
        sample=lambda r: (ints(r, -5, 15, 0, 8),),
    )


_WINDOW_OPS = {
    "sum": ("sum({w})", "the sum"),
    "max": ("max({w})", "the largest value"),
    "min": ("min({w})", "the smallest value"),
    "mean": ("sum({w}) // {size}", "the average rounded down (integer division)"),
}


def windows(rng: random.Random) -> Spec:
    """A value per window of consecutive elements, optionally wrapping around the end of the list."""
    op = rng.choice(sorted(_WINDOW_OPS))
    size = rng.randint(2, 4)
    circular = rng.random() < 0.4
    expr, what = _WINDOW_OPS[op]
    name = f"window_{op}s" + ("_circular" if circular else "")
    if circular:
        window = f"[xs[(i + j) % len(xs)] for j in range({size})]"
        body = "def {n}(xs):\n    return [{e} for i in range(len(xs))]"
        doc = (
            f"Return a list with, for every index i of xs, {what} of the {size} elements starting at i, wrapping "
            f"around to the start of the list when the window passes the end. An empty list gives []."
        )
        wrong = (
            source(body, n=name, e=expr.format(w=f"xs[i:i + {size}]", size=size)),
            source(body.replace("len(xs))", f"len(xs) - {size} + 1)"), n=name, e=expr.format(w=window, size=size)),
        )
    else:
        window = f"xs[i:i + {size}]"
        body = "def {n}(xs):\n    return [{e} for i in range(len(xs) - {size} + 1)]"
        doc = (
            f"Return a list with {what} of every window of {size} consecutive elements of xs, in order "
            f"(a list of length n gives n - {size - 1} values). A list shorter than {size} gives []."
        )
        wrong = (
            source(body.replace(" + 1)", ")"), n=name, e=expr.format(w=window, size=size), size=size),
            source(
                "def {n}(xs):\n    return [{e} for i in range(len(xs))]", n=name, e=expr.format(w=window, size=size)
            ),
        )
    solution = source(body, n=name, e=expr.format(w=window, size=size), size=size)
    edges: tuple[Args, ...] = ([],), ([4],), ([1, 2, 3, 4, 5],), ([-2, 7][: size - 1] + [3] * size,)
    return Spec(
        key=f"windows:{op}:{size}:{circular}",
        entry_point=name,
        params="xs: list[int]",
        returns="list[int]",
        doc=doc,
        solution=solution,
        wrong=wrong,
        edge_cases=edges,
        sample=lambda r: (ints(r, -5, 20, 2, 8),),
    )


_KEYS = {
    ("int", "same"): ("x", "equal"),
    ("int", "abs"): ("abs(x)", "equal in absolute value (3 and -3 are duplicates)"),
    ("str", "same"): ("x", "equal"),
    ("str", "lower"): ("x.lower()", "equal ignoring case ('Cat' and 'cat' are duplicates)"),
}


def _order_lost(ordered: str, elem: str) -> str:
    """The wrong variant's result: the distinct values in an order other than the one asked for. Strings never go
    through ``list(set(...))``: its order follows the per-process string hashing, so which inputs catch the bug
    (and so the task itself) would change from one process to the next."""
    if ordered == "sorted":
        return "sorted(set(xs))"
    return "list(set(xs))" if elem == "int" else "sorted(set(xs), reverse=True)"


def dedupe(rng: random.Random) -> Spec:
    """Remove duplicates keeping first or last occurrences, or keep only items that occur once."""
    elem, how = rng.choice(sorted(_KEYS))
    key, dup_doc = _KEYS[(elem, how)]
    mode = rng.choice(["first", "last", "unique"])
    ordered = rng.choice(["input", "sorted"])
    name = {"first": "dedupe_keep_first", "last": "dedupe_keep_last", "unique": "only_unique"}[mode]
    name += "_sorted" if ordered == "sorted" else ""
    ret = "sorted(out)" if ordered == "sorted" else "out"
    bodies = {
        "first": "    seen = set()\n    out = []\n    for x in xs:\n        if {k} not in seen:\n"
        "            seen.add({k})\n            out.append(x)\n    return {r}",
        "last": "    seen = set()\n    out = []\n    for x in reversed(xs):\n        if {k} not in seen:\n"
        "            seen.add({k})\n            out.insert(0, x)\n    return {r}",
        "unique": "    keys = [{k} for x in xs]\n    out = [x for x in xs if keys.count({k}) == 1]\n    return {r}",
    }
    head = "def {n}(xs):\n"
    what = {
        "first": "Remove duplicates from xs, keeping the first occurrence of each value",
        "last": "Remove duplicates from xs, keeping the last occurrence of each value",
        "unique": "Return the elements of xs whose value occurs exactly once in xs",
    }[mode]
    order_doc = "sorted in increasing order" if ordered == "sorted" else "in their original order"
    doc = f"{what}; two values are duplicates when they are {dup_doc}. Return them {order_doc}."
    other = {"first": "last", "last": "first", "unique": "first"}[mode]
    wrong = (
        source(head + bodies[mode], n=name, k="x", r=ret),
        source(head + bodies[other], n=name, k=key, r=ret),
        source(head + "    return {r}", n=name, r=_order_lost(ordered, elem)),
    )
    edges: tuple[Args, ...] = (
        (([3, -3, 1, 3, -1, 2],), ([],), ([5, 5],), ([-2, 4, 2, -4, 0],))
        if elem == "int"
        else ((["Cat", "dog", "cat", "Dog", "eel"],), ([],), (["a", "a"],), (["b", "B", "a", "A", "b"],))
    )

    def sample(r: random.Random) -> Args:
        if elem == "int":
            return (ints(r, -6, 6, 2, 8),)
        pool = [w for w in r.sample(WORDS, 4)] + [r.choice(WORDS).upper()]
        return ([r.choice(pool) for _ in range(r.randint(2, 7))],)

    return Spec(
        key=f"dedupe:{elem}:{how}:{mode}:{ordered}",
        entry_point=name,
        params=f"xs: list[{elem}]",
        returns=f"list[{elem}]",
        doc=doc,
        solution=source(head + bodies[mode], n=name, k=key, r=ret),
        wrong=wrong,
        edge_cases=edges,
        sample=sample,
    )


FAMILIES = (
    Family("filter_agg", "lists", filter_agg),
    Family("kth_value", "lists", kth_value),
    Family("windows", "lists", windows),
    Family("dedupe", "lists", dedupe),
)
