"""Plain data across the grading boundary: exact builtin types through JSON, opaque references for the rest.

Shipped as source into the solution's sandbox service and into the judge (stdlib only). ``encode`` tags
what JSON cannot tell apart (tuple from list, dict keys of any type, sets, non-finite floats, big ints,
bytes, complex, Fraction, Decimal); ``decode`` is strict, so only these exact shapes cross: no objects
with custom comparison, no pickles. Exceptions cross as a type name, their builtin bases and a message.
"""

from __future__ import annotations

import base64
import builtins
import json
import re
import sys
from collections.abc import Callable
from typing import Any

TAG = "$"
# Nesting the codec carries (one level per container, whatever its type); deeper containers cross as references,
# which compare by identity. Both sides stay within Python's default recursion limit at this depth.
MAX_DEPTH = 200
MAX_NODES = 2_000_000  # decoded values per message
MAX_TEXT_CHARS = 16 << 20  # of one encoded message: larger ones are not parsed at all
# Unequal keys of one set or dict sharing one hash: a real set of honest values has a handful at most, while a
# crafted one (ints that differ by multiples of 2**61 - 1) makes building it quadratic on the judge's CPU.
MAX_HASH_COLLISIONS = 64
BIG_INT_BITS = 8000  # a JSON int of ~4300+ digits hits Python's int/str limit; hex has none
MAX_MESSAGE_CHARS = 1000  # of an exception message
_HEX = re.compile(r"-?0x[0-9a-f]+")
_NON_FINITE = ("nan", "inf", "-inf")
# Exceptions that would change the control flow of the test code itself, so they never cross as themselves.
_NEVER_REBUILT = ("StopIteration", "StopAsyncIteration")


class WireError(ValueError):
    """Data that is not a valid encoding of plain values (a tampered or broken channel)."""


class WireSizeError(WireError):
    """A valid encoding of a value too large to decode (an honest solution can return one: not tampering)."""


class SolutionError(RuntimeError):
    """The solution failed in a way the test code must not catch as a builtin type (exit, StopIteration, ...)."""


def dumps(data: Any) -> str:
    """Compact JSON of already encoded data (NaN and infinities must be tagged, never bare)."""
    return json.dumps(data, allow_nan=False, separators=(",", ":"))


def _reject_constant(name: str) -> Any:
    raise WireError(f"bare {name} in JSON (non-finite floats are tagged)")


def loads(text: str) -> Any:
    """Parse JSON strictly; any failure is a WireError (a text over ``MAX_TEXT_CHARS`` a WireSizeError)."""
    if len(text) > MAX_TEXT_CHARS:
        raise WireSizeError(f"an encoded value of {len(text)} characters (at most {MAX_TEXT_CHARS} are parsed)")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError, TypeError) as exc:
        raise WireError(f"not valid JSON: {exc}") from None


def _stdlib_number(value: Any) -> Any:
    """The tag of a Fraction or Decimal (exact stdlib types only), else None."""
    kind = type(value)
    fractions, decimal = sys.modules.get("fractions"), sys.modules.get("decimal")
    if fractions is not None and kind is fractions.Fraction:
        return {TAG: "fraction", "v": [value.numerator, value.denominator]}
    if decimal is not None and kind is decimal.Decimal:
        return {TAG: "decimal", "v": str(value)}
    return None


class Encoder:
    """Encodes values; ``fallback(value)`` encodes anything else (a reference, or an error), including an exact
    container nested ``MAX_DEPTH`` deep or met again on its own path (a cycle). ``depth`` is the nesting of the
    value being passed to ``fallback``, so that a plain copy it encodes continues at that depth."""

    def __init__(self, fallback: Callable[[Any], Any]) -> None:
        self.fallback = fallback
        self.active: set[int] = set()  # containers on the current path: a cycle becomes a reference
        self.depth = 0

    def encode(self, value: Any, depth: int = 0) -> Any:
        """JSON-able data for ``value``."""
        kind = type(value)
        if value is None or kind is bool or kind is str:
            return value
        if kind is int:
            return value if value.bit_length() <= BIG_INT_BITS else {TAG: "int", "v": hex(value)}
        if kind is float:
            text = repr(value)
            return {TAG: "float", "v": text} if text in _NON_FINITE else value
        if kind is bytes or kind is bytearray:
            return {TAG: kind.__name__, "v": base64.b64encode(value).decode("ascii")}
        if kind is complex:
            return {TAG: "complex", "v": [self.encode(value.real), self.encode(value.imag)]}
        if kind in (list, tuple, dict, set, frozenset) and depth < MAX_DEPTH and id(value) not in self.active:
            self.active.add(id(value))
            try:
                return self._container(value, kind, depth + 1)
            finally:
                self.active.discard(id(value))
        number = _stdlib_number(value)
        if number is not None:
            return number
        self.depth = depth
        return self.fallback(value)

    def _container(self, value: Any, kind: type, depth: int) -> Any:
        if kind is dict:
            return {TAG: "dict", "v": [[self.encode(k, depth), self.encode(v, depth)] for k, v in value.items()]}
        items = [self.encode(item, depth) for item in value]
        return items if kind is list else {TAG: kind.__name__, "v": items}


class Decoder:
    """Strict decoding; ``resolve_ref(data)`` turns a reference into an object (or raises WireError)."""

    def __init__(self, resolve_ref: Callable[[dict[str, Any]], Any]) -> None:
        self.resolve_ref = resolve_ref
        self.budget = MAX_NODES

    def decode(self, data: Any, depth: int = 0) -> Any:
        """The value ``data`` encodes."""
        self.budget -= 1
        if self.budget < 0:
            raise WireSizeError(f"value of more than {MAX_NODES} items")
        if depth > MAX_DEPTH + 1:
            raise WireError("value nested deeper than the codec sends")
        kind = type(data)
        if data is None or kind in (bool, int, float, str):
            return data
        if kind is list:
            return [self.decode(item, depth + 1) for item in data]
        if kind is dict:
            return self._tagged(data, depth + 1)
        raise WireError(f"unexpected {kind.__name__} in encoded data")

    def _tagged(self, data: dict[str, Any], depth: int) -> Any:
        tag = data.get(TAG)
        if tag == "ref":
            return self.resolve_ref(data)
        if set(data) != {TAG, "v"}:
            raise WireError(f"malformed tagged value with keys {sorted(data)[:5]}")
        value = data["v"]
        if tag in ("list", "tuple", "set", "frozenset", "dict"):
            return self._container(tag, value, depth)
        return self._scalar(tag, value)

    def _container(self, tag: str, value: Any, depth: int) -> Any:
        if type(value) is not list or tag == "list":
            raise WireError(f"{tag} payload must be a list")
        if tag == "tuple":
            return tuple([self.decode(item, depth) for item in value])
        if tag == "dict":  # a key and its value are one level down, like a list's items
            if not all(type(pair) is list and len(pair) == 2 for pair in value):
                raise WireError("dict payload must be [key, value] pairs")
            pairs = [(self.decode(key, depth), self.decode(val, depth)) for key, val in value]
            _check_hashes([key for key, _ in pairs], tag)
            return dict(pairs)
        items = [self.decode(item, depth) for item in value]
        _check_hashes(items, tag)
        return set(items) if tag == "set" else frozenset(items)

    def _scalar(self, tag: Any, value: Any) -> Any:
        try:
            if tag == "float" and value in _NON_FINITE:
                return float(value)
            if tag == "int" and type(value) is str and _HEX.fullmatch(value):
                return int(value, 16)
            if tag in ("bytes", "bytearray") and type(value) is str:
                raw = base64.b64decode(value, validate=True)
                return raw if tag == "bytes" else bytearray(raw)
            if tag == "complex" and type(value) is list and len(value) == 2:
                real, imag = (self.decode(part) for part in value)
                if type(real) is float and type(imag) is float:
                    return complex(real, imag)
            if tag == "fraction" and type(value) is list and [type(part) for part in value] == [int, int]:
                import fractions

                return fractions.Fraction(value[0], value[1])
            if tag == "decimal" and type(value) is str and len(value) <= 1000:
                import decimal

                return decimal.Decimal(value)
        except (ValueError, ZeroDivisionError, ArithmeticError) as exc:
            raise WireError(f"bad {tag}: {exc}") from None
        raise WireError(f"unknown or malformed tag {str(tag)[:40]!r}")


def _check_hashes(keys: list[Any], tag: str) -> None:
    """Reject keys that cannot be hashed, or too many sharing one hash (the set or dict would take quadratic time)."""
    counts: dict[int, int] = {}
    try:
        for key in keys:
            code = hash(key)
            counts[code] = seen = counts.get(code, 0) + 1
            if seen > MAX_HASH_COLLISIONS:
                raise WireSizeError(f"a {tag} with more than {MAX_HASH_COLLISIONS} keys of one hash")
    except TypeError as exc:  # an unhashable key or element
        raise WireError(f"bad {tag}: {exc}") from None


def describe_exception(exc: BaseException) -> dict[str, Any]:
    """An exception as plain data: its type name, the builtin exception types it derives from, its message."""
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - a hostile __str__ must not break the reply
        message = "<unprintable>"
    bases = [cls.__name__ for cls in type(exc).__mro__ if getattr(builtins, cls.__name__, None) is cls]
    return {"type": type(exc).__qualname__[:100], "builtin": bases[:20], "message": message[:MAX_MESSAGE_CHARS]}


def rebuild_exception(data: Any) -> BaseException:
    """The exception to raise in the test code for a described one: its nearest builtin ``Exception`` type.

    StopIteration (it would end a test's loop early), exits and anything unknown become SolutionError.
    """
    if type(data) is not dict or type(data.get("type")) is not str or type(data.get("message")) is not str:
        raise WireError("malformed exception description")
    names = data.get("builtin")
    label = f"the solution raised {data['type']}: {data['message']}"
    for name in names if type(names) is list else []:
        cls = getattr(builtins, name, None) if type(name) is str else None
        if name in _NEVER_REBUILT:
            break
        if isinstance(cls, type) and issubclass(cls, Exception):
            try:
                return cls(data["message"])
            except TypeError:  # e.g. UnicodeDecodeError needs five arguments: try a more general base
                continue
    return SolutionError(label)
