"""String families: counting characters, removing affixes, filtering words, rotating."""

from __future__ import annotations

import random

from envs.code_tasks.spec import WORDS, Args, Family, Spec, source, words

_LETTERS = "aeinorst"


def _mixed_case_text(rng: random.Random, low: int = 1, high: int = 5) -> str:
    picked = [rng.choice((str.lower, str.upper, str.capitalize, str))(w) for w in words(rng, WORDS, low, high)]
    if rng.random() < 0.3:
        picked.append(str(rng.randint(0, 999)))
    return " ".join(picked)


def _count_expr(chars: str, fold: bool, threshold: int, *, distinct: bool = False, strict: bool = False) -> str:
    text = "s.lower()" if fold else "s"
    counted = (
        f"len(set(ch for ch in {text} if ch in {chars!r}))"
        if distinct
        else f"sum(1 for ch in {text} if ch in {chars!r})"
    )
    return counted if not threshold else f"{counted} {'>' if strict else '>='} {threshold}"


def count_chars(rng: random.Random) -> Spec:
    """How many characters of a class (vowels, a letter, digits) s holds; or whether it holds at least n."""
    target = rng.choice(["vowels", "digits", "letter", "letter", "letter"])
    letter = rng.choice(_LETTERS)
    chars, what, fold = {
        "vowels": ("aeiou", "vowels (a, e, i, o, u; upper or lower case)", True),
        "digits": ("0123456789", "digits", False),
        "letter": (letter, f"letters {letter!r}", rng.random() < 0.5),
    }[target]
    if target == "letter":
        upper = letter.upper()
        what += f" (upper-case {upper!r} counts too)" if fold else f" (case matters: {upper!r} does not count)"
    threshold = rng.choice([0, 0, 2, 3])
    label = letter if target == "letter" else target
    name = f"has_{threshold}_{label}" if threshold else f"count_{label}"
    doc = (
        f"Return True if s contains at least {threshold} {what}, else False."
        if threshold
        else f"Return the number of {what} in s."
    )
    variants = [
        _count_expr(chars, not fold, threshold),
        _count_expr(chars, fold, threshold, distinct=True),
        _count_expr(chars + "y", fold, threshold) if target == "vowels" else "",
        _count_expr(chars, fold, threshold, strict=True) if threshold else "",
    ]
    template = "def {n}(s):\n    return {r}"
    capital = chars.upper() if chars.isalpha() else chars
    edges: tuple[Args, ...] = (
        (f"{capital} Sky {chars}",),
        ("",),
        (f"{chars[0]}{chars[0]}y",),
        ("Yy " + capital[0] * 2,),
    )
    return Spec(
        key=f"count_chars:{chars}:{fold}:{threshold}",
        entry_point=name,
        params="s: str",
        returns="bool" if threshold else "int",
        doc=doc,
        solution=source(template, n=name, r=_count_expr(chars, fold, threshold)),
        wrong=tuple(source(template, n=name, r=v) for v in variants if v),
        edge_cases=edges,
        sample=lambda r: (_sprinkle(r, _mixed_case_text(r), chars),),
    )


def _sprinkle(rng: random.Random, text: str, chars: str) -> str:
    """``text`` with a few characters of ``chars`` (either case) inserted, so counts vary from draw to draw."""
    out = list(text)
    for _ in range(rng.randint(0, 3)):
        ch = rng.choice(chars)
        out.insert(rng.randint(0, len(out)), ch.upper() if rng.random() < 0.4 else ch)
    return "".join(out)


_PREFIXES = ("re", "un", "pre", "dis", "over", "mis", "non", "sub", "in", "de")
_SUFFIXES = ("ing", "ed", "ly", "er", "est", "ness", "ful", "s", "es", "less")


def strip_affix(rng: random.Random) -> Spec:
    """Remove a prefix or suffix once, or every repetition of it."""
    kind = rng.choice(["prefix", "suffix"])
    affix = rng.choice(_PREFIXES if kind == "prefix" else _SUFFIXES)
    repeated = rng.random() < 0.35
    name = f"remove_{kind}_{affix}" + ("_all" if repeated else "")
    test = f"s.startswith({affix!r})" if kind == "prefix" else f"s.endswith({affix!r})"
    cut = f"s[{len(affix)}:]" if kind == "prefix" else f"s[:-{len(affix)}]"
    strip = "lstrip" if kind == "prefix" else "rstrip"
    loop = "while" if repeated else "if"
    body = "def {n}(s):\n    {loop} {t}:\n        s = {c}\n    return s"
    where = "starts" if kind == "prefix" else "ends"
    doc = (
        f"If s {where} with {affix!r}, return s without that {kind}"
        + (f"; keep removing it while s still {where} with {affix!r}." if repeated else " (remove it once).")
        + " Otherwise return s unchanged."
    )
    wrong = (
        source("def {n}(s):\n    return s.{f}({a!r})", n=name, f=strip, a=affix),
        source("def {n}(s):\n    return s.replace({a!r}, '')", n=name, a=affix),
        source("def {n}(s):\n    return {c}", n=name, c=cut),
        source(body, n=name, loop="if" if repeated else "while", t=test, c=cut),
    )
    twice = affix * 2 + "x" if kind == "prefix" else "x" + affix * 2
    tricky = affix + affix[0] + "ab" if kind == "prefix" else "ba" + affix[-1] + affix
    edges: tuple[Args, ...] = ((tricky,), (twice,), (affix,), ("",), ("x" + affix + "y",))

    def sample(r: random.Random) -> Args:
        word = r.choice(WORDS).lower()
        if r.random() < 0.65:
            word = affix + word if kind == "prefix" else word + affix
        return (word,)

    return Spec(
        key=f"strip_affix:{kind}:{affix}:{repeated}",
        entry_point=name,
        params="s: str",
        returns="str",
        doc=doc,
        solution=source(body, n=name, loop=loop, t=test, c=cut),
        wrong=wrong,
        edge_cases=edges,
        sample=sample,
    )


_CONDITIONS = {
    "long": ("len(w) >= {n}", "have at least {n} letters", "len(w) > {n}"),
    "short": ("len(w) < {n}", "have fewer than {n} letters", "len(w) <= {n}"),
    "vowel": ("w[0].lower() in 'aeiou'", "start with a vowel (upper or lower case)", "w[0] in 'aeiou'"),
    "capital": ("w[0].isupper()", "start with an upper-case letter", "w[0] != w[0].lower()"),
    "ends": ("w.endswith({c!r})", "end with {c!r}", "{c!r} in w"),
}
_TRANSFORMS = {
    "": "unchanged",
    ".upper()": "in upper case",
    ".lower()": "in lower case",
    ".capitalize()": "capitalized (first letter upper case, the rest lower case)",
    "[::-1]": "reversed (letters in reverse order)",
}


def word_filter(rng: random.Random) -> Spec:
    """Keep the words of a sentence that satisfy a condition, transform them, and join them."""
    cond_name = rng.choice(sorted(_CONDITIONS))
    n, c = rng.randint(3, 5), rng.choice("entra")
    cond, cond_doc, cond_bug = (part.format(n=n, c=c) for part in _CONDITIONS[cond_name])
    transform = rng.choice(sorted(_TRANSFORMS))
    sep = rng.choice([" ", "-", ", ", "_"])
    name = f"keep_{cond_name}_words"
    body = "def {n}(s):\n    kept = [w{t} for w in s.{split} if {cond}]\n    return {sep!r}.join(kept)"
    doc = (
        f"Split s into words (separated by any amount of whitespace), keep the words that {cond_doc}, "
        f"and return them {_TRANSFORMS[transform]}, in their original order, joined by {sep!r}."
    )
    wrong = [
        source(body, n=name, t=transform, split="split(' ')", cond=cond, sep=sep),
        source(body, n=name, t=transform, split="split()", cond=cond_bug, sep=sep),
    ]
    if transform:
        wrong.append(source(body, n=name, t="", split="split()", cond=cond, sep=sep))
    edges: tuple[Args, ...] = (("  Apple  an   orbit Sky eagle ",), ("",), ("I a an it",), ("Ocean   Tree  seen",))
    return Spec(
        key=f"word_filter:{cond}:{transform}:{sep}",
        entry_point=name,
        params="s: str",
        returns="str",
        doc=doc,
        solution=source(body, n=name, t=transform, split="split()", cond=cond, sep=sep),
        wrong=tuple(wrong),
        edge_cases=edges,
        sample=lambda r: (" ".join(words(r, WORDS, 2, 7)),),
    )


def rotate(rng: random.Random) -> Spec:
    """Rotate a string or a list left or right by k places (k may exceed the length)."""
    seq = rng.choice(["str", "list"])
    left = rng.random() < 0.5
    fixed = rng.choice([None, None, 1, 2, 3, 4, 5])
    direction = "left" if left else "right"
    name = f"rotate_{direction}" + (f"_{fixed}" if fixed else "")
    params = f"{'s: str' if seq == 'str' else 'xs: list'}" + ("" if fixed else ", k: int")
    var = "s" if seq == "str" else "xs"
    head = f"def {name}({var}" + ("" if fixed else ", k") + "):\n"
    k_expr = str(fixed) if fixed else "k"
    left_expr = f"{var}[k:] + {var}[:k]"
    right_expr = f"{var}[len({var}) - k:] + {var}[:len({var}) - k]"
    rot, anti = (left_expr, right_expr) if left else (right_expr, left_expr)
    body = head + "    if not {v}:\n        return {v}\n    k = {k} % len({v})\n    return {rot}"
    amount = f"{fixed} place{'s' if fixed > 1 else ''}" if fixed else "k places"
    what = "the string s" if seq == "str" else "the list xs"
    doc = (
        f"Return {what} rotated to the {direction} by {amount}: each item moves {amount} towards the "
        f"{'front' if left else 'end'} and the items that fall off the {'front' if left else 'end'} come back at "
        f"the {'end' if left else 'front'}. The amount may be larger than the length. An empty input is returned "
        "unchanged."
    )
    wrong = (
        source(head + "    k = {k} % len({v})\n    return {rot}", v=var, k=k_expr, rot=rot),
        source(head + "    k = {k}\n    return {rot}", v=var, k=k_expr, rot=rot),
        source(body, v=var, k=k_expr, rot=anti),
    )

    def sample(r: random.Random) -> Args:
        items = r.choice(WORDS).lower() if seq == "str" else [r.randint(0, 9) for _ in range(r.randint(2, 6))]
        return (items,) if fixed else (items, r.randint(0, 12))

    empty = "" if seq == "str" else []
    edge_item = "abcde" if seq == "str" else [1, 2, 3, 4]
    size = len(edge_item)
    edges: tuple[Args, ...] = (
        ((edge_item,), (empty,), ("ab" if seq == "str" else [7, 8],))
        if fixed
        else ((edge_item, size + 2), (empty, 3), (edge_item, 0), (edge_item, 2 * size + 1))
    )
    return Spec(
        key=f"rotate:{seq}:{direction}:{fixed}",
        entry_point=name,
        params=params,
        returns=seq,
        doc=doc,
        solution=source(body, v=var, k=k_expr, rot=rot),
        wrong=wrong,
        edge_cases=edges,
        sample=sample,
    )


FAMILIES = (
    Family("count_chars", "strings", count_chars),
    Family("strip_affix", "strings", strip_affix),
    Family("word_filter", "strings", word_filter),
    Family("rotate", "strings", rotate),
)
