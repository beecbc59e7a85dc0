"""Dict and parsing families: word counts, grouping, parsing key=value pairs and number lists."""

from __future__ import annotations

import random

from envs.code_tasks.spec import WORDS, Args, Family, Spec, source, words


def _sentence(rng: random.Random, low: int = 2, high: int = 8) -> str:
    picked = words(rng, WORDS[:12], low, high)  # a small vocabulary, so words repeat
    styled = [
        rng.choice((str, str, str.upper, str.capitalize))(w) + rng.choice(["", "", "", ".", ",", "!"]) for w in picked
    ]
    return " ".join(styled)


def word_counts(rng: random.Random) -> Spec:
    """Count words (case folded or not, punctuation stripped or not, short words skipped) or list the repeated ones."""
    fold, strip = rng.random() < 0.6, rng.random() < 0.5
    min_len = rng.choice([1, 1, 2, 3, 4])
    output = rng.choice(["counts", "repeated"])
    norm = "w" + (".lower()" if fold else "") + (".strip('.,!?')" if strip else "")
    rules = [
        "words are separated by any amount of whitespace",
        "upper and lower case count as the same word (use lower case)"
        if fold
        else "case matters ('Cat' and 'cat' differ)",
    ]
    if strip:
        rules.append("strip the punctuation characters . , ! ? from both ends of each word")
    if min_len > 1:
        rules.append(f"skip words shorter than {min_len} characters (after the steps above)")
    keep = f"if len(w) >= {min_len}:" if min_len > 1 else "if w:"
    count_body = (
        "def {n}(text):\n    counts = {{}}\n    for w in text.{split}:\n        w = {norm}\n        {keep}\n"
        "            counts[w] = counts.get(w, 0) + 1\n    return {ret}"
    )
    if output == "counts":
        name, ret, returns = "word_counts", "counts", "dict[str, int]"
        what = "Return a dict mapping each word of text to the number of times it occurs"
    else:
        name, ret, returns = "repeated_words", "[w for w, c in counts.items() if c >= 2]", "list[str]"
        what = "Return the list of words that occur at least twice in text, in the order of their first occurrence"
    doc = f"{what}. Rules: " + "; ".join(rules) + "."
    flip = "w" + ("" if fold else ".lower()") + (".strip('.,!?')" if strip else "")
    wrong = [
        source(count_body, n=name, split="split(' ')", norm=norm, keep=keep, ret=ret),
        source(count_body, n=name, split="split()", norm=flip, keep=keep, ret=ret),
        source(count_body, n=name, split="split()", norm=norm, keep=keep.replace(">=", ">"), ret=ret),
    ]
    if strip:
        wrong.append(
            source(count_body, n=name, split="split()", norm=norm.replace(".strip('.,!?')", ""), keep=keep, ret=ret)
        )
    edges: tuple[Args, ...] = (("The the  THE. cat!",), ("",), ("an  An, an ... ab ab Ab",), ("Go go, GO! go",))
    return Spec(
        key=f"word_counts:{fold}:{strip}:{min_len}:{output}",
        entry_point=name,
        params="text: str",
        returns=returns,
        doc=doc,
        solution=source(count_body, n=name, split="split()", norm=norm, keep=keep, ret=ret),
        wrong=tuple(dict.fromkeys(wrong)),
        edge_cases=edges,
        sample=lambda r: (_sentence(r),),
    )


_GROUP_KEYS = {
    "length": ("len(w)", "their length"),
    "first": ("w[0]", "their first character (case matters)"),
    "first_lower": ("w[0].lower()", "their first letter in lower case"),
    "last": ("w[-1]", "their last character (case matters)"),
    "last_lower": ("w[-1].lower()", "their last letter in lower case"),
}


def group_by(rng: random.Random) -> Spec:
    """Group words by a key into lists (or counts), keys in order of first appearance."""
    key_name = rng.choice(sorted(_GROUP_KEYS))
    key, key_doc = _GROUP_KEYS[key_name]
    counts = rng.random() < 0.4
    distinct = rng.random() < 0.4
    name = f"{'count' if counts else 'group'}_by_{key_name}" + ("_distinct" if distinct else "")
    if counts:
        add = "groups[k] = groups.get(k, 0) + 1"
        what = "the number of words" + (" (distinct words: a repeated word counts once)" if distinct else "")
    else:
        add = "groups.setdefault(k, []).append(w)"
        what = "the list of its words in their original order" + (" (each distinct word once)" if distinct else "")
    guard = "if w in seen:\n            continue\n        seen.add(w)\n        " if distinct else ""
    body = (
        "def {n}(ws):\n    groups = {{}}\n    seen = set()\n    for w in ws:\n        {g}k = {key}\n"
        "        {add}\n    return groups"
    )
    doc = (
        f"Group the words in ws by {key_doc}: return a dict mapping each key to {what}. Keys appear in the order "
        "in which they are first seen; an empty list gives {}."
    )
    overwrite = "groups[k] = 1" if counts else "groups[k] = [w]"
    other_key = {"first": "w[0].lower()", "first_lower": "w[0]", "last": "w[-1].lower()", "last_lower": "w[-1]"}
    wrong = [
        source(body, n=name, g=guard, key=key, add=overwrite),
        source(body, n=name, g="" if distinct else guard, key=key, add=add),
    ]
    if key_name in other_key:
        wrong.append(source(body, n=name, g=guard, key=other_key[key_name], add=add))
    edges: tuple[Args, ...] = ((["Apple", "ant", "apple", "Bee", "ant", "tea"],), ([],), (["a", "A", "a"],))
    return Spec(
        key=f"group_by:{key_name}:{counts}:{distinct}",
        entry_point=name,
        params="ws: list[str]",
        returns="dict",
        doc=doc,
        solution=source(body, n=name, g=guard, key=key, add=add),
        wrong=tuple(wrong),
        edge_cases=edges,
        sample=lambda r: (words(r, WORDS[:14], 1, 7),),
    )


def parse_pairs(rng: random.Random) -> Spec:
    """Parse 'key=value' items separated by a separator into a dict, or sum the values."""
    sep, eq = rng.choice([";", ",", "&", "|"]), rng.choice(["=", ":"])
    output = rng.choice(["int", "str", "sum"])
    name = {"int": "parse_int_pairs", "str": "parse_pairs", "sum": "sum_pair_values"}[output]
    value = "value.strip()" if output == "str" else "int(value)"
    store = "total += int(value)" if output == "sum" else f"result[key.strip()] = {value}"
    init, ret = ("total = 0", "total") if output == "sum" else ("result = {}", "result")
    body = (
        "def {n}(text):\n    {init}\n    for part in text.split({sep!r}):\n{skip}"
        "        key, value = part.split({eq!r}, 1)\n        {store}\n    return {ret}"
    )
    skip = "        if not part.strip():\n            continue\n"
    item = f"'key{eq}value'"
    what = {
        "int": "Return a dict mapping each key (spaces around it removed) to its value as an int",
        "str": "Return a dict mapping each key to its value, both with the spaces around them removed",
        "sum": "Return the sum of the values (as ints)",
    }[output]
    doc = (
        f"text holds items {item} separated by {sep!r}; items may be empty or surrounded by spaces (skip empty "
        f"items). {what}; an empty text gives {'0' if output == 'sum' else '{}'}."
    )
    kw = {"n": name, "init": init, "sep": sep, "eq": eq, "ret": ret}
    wrong = [source(body, skip="", store=store, **kw)]
    if output != "sum":
        wrong.append(source(body, skip=skip, store=store.replace("key.strip()", "key"), **kw))
    if output == "str":
        wrong.append(source(body, skip=skip, store=store.replace("value.strip()", "value"), **kw))

    def sample(r: random.Random) -> Args:
        keys = r.sample(["a", "b", "x", "y", "id", "n", "size", "age"], r.randint(1, 4))
        items = [f"{r.choice(['', ' '])}{k}{eq}{r.choice(['', ' '])}{r.randint(-20, 99)}" for k in keys]
        return (sep.join(items) + r.choice(["", "", sep]),)

    edges: tuple[Args, ...] = (("",), (f" x {eq} 5 {sep} y{eq}-2{sep}",), (f"a{eq}1{sep}{sep}b{eq}2",))
    return Spec(
        key=f"parse_pairs:{sep}:{eq}:{output}",
        entry_point=name,
        params="text: str",
        returns="int" if output == "sum" else "dict",
        doc=doc,
        solution=source(body, skip=skip, store=store, **kw),
        wrong=tuple(wrong),
        edge_cases=edges,
        sample=sample,
    )


_NUMBER_AGGS = {
    "sum": ("sum(values)", "the sum of the numbers (0 if there are none)", "sum_numbers"),
    "max": ("max(values) if values else None", "the largest number, or None if there are none", "max_number"),
    "list": ("values", "the list of the numbers as ints, in order", "parse_numbers"),
    "evens": ("sum(1 for v in values if v % 2 == 0)", "how many of the numbers are even", "count_even_numbers"),
}


def parse_numbers(rng: random.Random) -> Spec:
    """Parse integers separated by a separator (blank items skipped) and aggregate them."""
    sep = rng.choice([",", ";", "|", "/"])
    agg = rng.choice(sorted(_NUMBER_AGGS))
    expr, what, name = _NUMBER_AGGS[agg]
    body = "def {n}(text):\n    values = [int(p) for p in text.split({sep!r}){skip}]\n    return {e}"
    doc = (
        f"text holds integers separated by {sep!r}, possibly with spaces around them, negative numbers, and empty "
        f"items (skip those). Return {what}."
    )
    wrong = [source(body, n=name, sep=sep, skip="", e=expr)]
    if agg == "max":
        wrong.append(source(body, n=name, sep=sep, skip=" if p.strip()", e="max(values)"))
    if agg == "sum":
        wrong.append(source(body, n=name, sep=sep, skip=" if p.strip().isdigit()", e=expr))

    def sample(r: random.Random) -> Args:
        numbers = [f"{r.choice(['', ' '])}{r.randint(-30, 99)}" for _ in range(r.randint(1, 6))]
        return (sep.join(numbers),)

    edges: tuple[Args, ...] = (("",), (f" 4{sep} -7 {sep}{sep}10{sep}",), ("-3",))
    return Spec(
        key=f"parse_numbers:{sep}:{agg}",
        entry_point=name,
        params="text: str",
        returns={"sum": "int", "max": "int | None", "list": "list[int]", "evens": "int"}[agg],
        doc=doc,
        solution=source(body, n=name, sep=sep, skip=" if p.strip()", e=expr),
        wrong=tuple(wrong),
        edge_cases=edges,
        sample=sample,
    )


FAMILIES = (
    Family("word_counts", "dicts", word_counts),
    Family("group_by", "dicts", group_by),
    Family("parse_pairs", "parsing", parse_pairs),
    Family("parse_numbers", "parsing", parse_numbers),
)
