"""Config values taken as they are given, not as pydantic's lax mode would convert them.

Lax mode reads `true` as the integer 1 (`rounds: true` runs one round), 0 or "yes" as a boolean, and takes an
integer of any size. Strict mode would refuse those but also the strings PyYAML makes of `1e-3` (no dot, so not a
YAML float), which a float field must keep reading. So every schema of the config (the experiment's blocks, the
models' and the algorithms' options) derives from `TypedValues`, which refuses, before pydantic converts:

- a boolean where a number is expected (an integer or a float, alone or in a list or mapping);
- a number, or a string, where only a boolean is;
- an integer past `max_int` (±(2⁶³ − 1): the values end in numpy's and torch's 64-bit integers) where an integer
  is expected.
"""
from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import InitErrorDetails

INT64_MAX = 2**63 - 1
_SEQUENCES = (list, tuple, set, frozenset, Sequence)
_MAPPINGS = (dict, Mapping)


def _constraints(items: Any) -> tuple:
    """The annotated-types constraints (Ge, Le, ...) among `items`, those of a Field(...) included."""
    return tuple(c for item in items for c in (_constraints(item.metadata) if isinstance(item, FieldInfo) else [item]))


def _members(annotation: Any, constraints: tuple = ()) -> list[tuple[Any, tuple]]:
    """The types a value of `annotation` may be, each with the constraints on it: Annotated unwrapped, unions
    flattened."""
    while get_origin(annotation) is Annotated:
        annotation, *extra = get_args(annotation)
        constraints = (*constraints, *_constraints(extra))
    if get_origin(annotation) in (Union, types.UnionType):
        return [m for arg in get_args(annotation) for m in _members(arg, constraints)]
    return [(annotation, constraints)]


def _bounded(constraints: tuple, value: int, max_int: int) -> bool:
    """Whether the constraints refuse `value`, an integer past ±max_int, themselves (pydantic then says how)."""
    if value > 0:
        return any(getattr(c, key, None) is not None and getattr(c, key) <= max_int for c in constraints
                   for key in ("le", "lt"))
    return any(getattr(c, key, None) is not None and getattr(c, key) >= -max_int for c in constraints
               for key in ("ge", "gt"))


def _number_word(scalars: set[type]) -> str:
    return "an integer" if float not in scalars else "a number"


def misplaced(annotation: Any, value: Any, max_int: int | None = INT64_MAX,
              constraints: tuple = ()) -> tuple[tuple, Any, str] | None:
    """Why `value` does not belong where `annotation` (under `constraints`) is expected although lax validation
    would convert it, as (where in `value`: list indexes and mapping keys, the value there, the problem); None when
    it may be validated (which may still refuse it)."""
    typed = _members(annotation, _constraints(constraints))
    members = [m for m, _ in typed]
    if any(m is Any for m in members):
        return None
    scalars = {m for m in members if m in (bool, int, float)}
    if isinstance(value, bool):
        if scalars and bool not in scalars:
            return (), value, f"expected {_number_word(scalars)}, not a boolean (true/false)"
        return None
    if isinstance(value, int):
        if (int in scalars and max_int is not None and abs(value) > max_int
                and not any(m is int and _bounded(c, value, max_int) for m, c in typed)):
            bound = f"at most {max_int}" if value > 0 else f"at least {-max_int}"
            return (), value, f"out of range: {bound}"
        if scalars == {bool}:
            return (), value, "expected true or false"
        return None
    if isinstance(value, (float, str)):
        takes_text = any(m is str or get_origin(m) is Literal for m in members)
        if scalars == {bool} and not takes_text:
            return (), value, "expected true or false"
        return None
    if isinstance(value, (list, tuple)):
        m = next((m for m in members if get_origin(m) in _SEQUENCES and get_args(m)), None)
        if m is None:
            return None
        args = get_args(m)
        per_item = get_origin(m) is not tuple or (len(args) == 2 and args[1] is Ellipsis)
        for i, item in enumerate(value if per_item else value[:len(args)]):
            found = misplaced(args[0] if per_item else args[i], item, max_int)
            if found:
                return (i, *found[0]), found[1], found[2]
        return None
    if isinstance(value, Mapping):
        m = next((m for m in members if get_origin(m) in _MAPPINGS and len(get_args(m)) == 2), None)
        for key, item in value.items() if m is not None else ():
            found = misplaced(get_args(m)[1], item, max_int)
            if found:
                return (key, *found[0]), found[1], found[2]
    return None


class TypedValues(BaseModel):
    """A schema whose fields take values of their own type (see the module's docstring); `max_int` bounds its
    integer fields (None: unbounded)."""

    max_int: ClassVar[int | None] = INT64_MAX

    @model_validator(mode="before")
    @classmethod
    def values_as_given(cls, data: Any) -> Any:
        # a model validator, not a field validator on "*": pydantic refuses those on a discriminator field
        if isinstance(data, Mapping):
            for name, value in data.items():
                field = cls.model_fields.get(name) if isinstance(name, str) else None
                found = misplaced(field.annotation, value, cls.max_int, field.metadata) if field is not None else None
                if found:
                    where, given, problem = found
                    raise ValidationError.from_exception_data(cls.__name__, [InitErrorDetails(
                        type="value_error", loc=(name, *where), input=given, ctx={"error": ValueError(problem)})])
        return data
