"""Does a YAML value fit a Python type annotation? The type checks of recipe fields and of
TRL's GRPOConfig fields, with messages in a user's words."""

from __future__ import annotations

import enum
import math
import types
import typing
from typing import Any, Literal, Optional, Union


def kind(value: Any) -> str:
    """What a YAML value is, in the words an error message uses."""
    if value is None:
        return "null"
    for cls, word in ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
                      (list, "a list"), (dict, "a mapping")):
        if isinstance(value, cls):
            return word
    return f"a {type(value).__name__}"


def describe(hint: Any) -> str:
    """An annotation in words: ``int | None`` -> 'an integer or null'."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is type(None) or hint is None:
        return "null"
    if origin in (Union, types.UnionType):
        return " or ".join(dict.fromkeys(describe(a) for a in args))
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is list or hint is list:
        plural = {str: "strings", int: "integers", float: "numbers", bool: "booleans"}
        return f"a list of {plural.get(args[0], describe(args[0]) + ' items')}" if args else "a list"
    if origin is dict or hint is dict:
        return "a mapping"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(repr(e.value) for e in hint)
    words = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if hint in words:
        return words[hint]
    return getattr(hint, "__name__", str(hint))


def fits(value: Any, hint: Any) -> Optional[bool]:
    """Whether a YAML value fits a type annotation: True, False, or None for an annotation form
    this does not know (accepted). An int fits a float; a bool fits neither an int nor a float."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if hint is type(None) or hint is None:
        return value is None
    if origin in (Union, types.UnionType):
        results = [fits(value, a) for a in args]
        return True if True in results else (None if None in results else False)
    if origin is Literal:
        return any(type(value) is type(a) and value == a for a in args)
    if origin in (list, tuple, set, frozenset) or hint in (list, tuple, set, frozenset):
        if not isinstance(value, list):
            return False
        if args and origin is list:
            return False if any(fits(v, args[0]) is False for v in value) else True
        return True
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            return False
        if len(args) == 2:
            bad = any(fits(k, args[0]) is False or fits(v, args[1]) is False for k, v in value.items())
            return not bad
        return True
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return isinstance(value, hint) or any(type(value) is type(e.value) and value == e.value for e in hint)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return None


def type_error(value: Any, hint: Any) -> Optional[str]:
    """None when ``value`` fits the annotation ``hint``; otherwise what was expected and what
    came."""
    if fits(value, hint) is not False:
        if isinstance(value, float) and math.isnan(value):
            return "must be a number, not NaN"
        return None
    got = f"{kind(value)} ({value!r})" if isinstance(value, (str, int, float)) else kind(value)
    message = f"expected {describe(hint)}, got {got}"
    if isinstance(value, str) and fits(1.5, hint):
        try:
            float(value)
            message += " (YAML reads 1e-5 as a string: write 1.0e-5)" if "e" in value.lower() else \
                " (remove the quotes)"
        except ValueError:
            pass
    elif isinstance(value, str) and fits(1, hint) and value.strip().lstrip("-").isdigit():
        message += " (remove the quotes)"
    return message
