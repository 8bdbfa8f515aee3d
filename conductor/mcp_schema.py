"""JSON Schema for a tool's input, derived from a plain Python signature.

`async def search(self, query: str, limit: int = 10, tags: list[str] | None = None)`
becomes an object schema with `query` required and the others optional, so a
tool author writes a normal function and the agent still gets a precise schema.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, Literal, Union

__all__ = ["input_schema", "type_schema"]

_SIMPLE: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    dict: {"type": "object"},
    list: {"type": "array"},
    Any: {},
}


def type_schema(annotation: Any) -> dict[str, Any]:
    """The schema of one annotation; unknown types give `{}` (anything goes)."""
    if annotation in _SIMPLE:
        return dict(_SIMPLE[annotation])
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if len(members) == 1:
            return type_schema(members[0])
        return {"anyOf": [type_schema(a) for a in members]}
    if origin in (list, tuple, set, frozenset) or (
        isinstance(origin, type) and issubclass(origin, Sequence)
    ):
        schema: dict[str, Any] = {"type": "array"}
        if args and args[-1] is not Ellipsis:
            schema["items"] = type_schema(args[0])
        return schema
    if origin is dict:
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = type_schema(args[1])
        return schema
    return {}


def input_schema(func: Callable[..., Any], skip: set[str]) -> dict[str, Any]:
    """An object schema for `func`'s parameters (minus `self` and those named in `skip`)."""
    signature = inspect.signature(func)
    hints = typing.get_type_hints(func)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, parameter in signature.parameters.items():
        if name == "self" or name in skip:
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        schema = type_schema(hints.get(name, Any))
        if parameter.default is parameter.empty:
            required.append(name)
        elif parameter.default is not None:
            schema["default"] = parameter.default
        properties[name] = schema
    result: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        result["required"] = required
    return result
