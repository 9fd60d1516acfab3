"""Just enough GraphQL for the emulator: parse one operation and project results onto its selections.

Covers what the ``runpod`` SDK sends: ``query``/``mutation`` with an optional name, fields with
literal arguments (strings, numbers, booleans, null, enum names, lists, input objects) and nested
selection sets. No variables, fragments or directives (the SDK uses none).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import attrs


class GraphQLSyntaxError(ValueError):
    """The document is not GraphQL this parser understands."""


class GraphQLFieldError(ValueError):
    """A selected field does not exist on its type."""


@attrs.frozen
class Enum:
    """A bare enum value in an argument (``cloudType: SECURE``)."""

    name: str


@attrs.frozen
class Field:
    name: str
    args: dict[str, Any] = attrs.field(factory=dict)
    selections: tuple[Field, ...] = ()


@attrs.frozen
class Operation:
    kind: str
    name: str | None
    fields: tuple[Field, ...]


_TOKEN = re.compile(
    r"""(?P<skip>[\s,]+|\#[^\n]*)
      |(?P<string>"(?:\\.|[^"\\\n])*")
      |(?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
      |(?P<name>[_A-Za-z][_0-9A-Za-z]*)
      |(?P<punct>[{}()\[\]:!$=@])""",
    re.VERBOSE,
)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise GraphQLSyntaxError(f"Syntax Error: Unexpected character {text[pos]!r} at offset {pos}")
        kind = m.lastgroup or ""
        if kind != "skip":
            out.append((kind, m.group()))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, value: str | None = None, kind: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value) or (kind is not None and tok[0] != kind):
            want = value or kind
            got = "end of document" if tok is None else repr(tok[1])
            raise GraphQLSyntaxError(f"Syntax Error: Expected {want}, found {got}")
        self.i += 1
        return tok[1]

    def at(self, value: str) -> bool:
        tok = self.peek()
        return tok is not None and tok[0] == "punct" and tok[1] == value

    def operation(self) -> Operation:
        kind, name = "query", None
        tok = self.peek()
        if tok is not None and tok[0] == "name":
            kind = self.take(kind="name")
            if kind not in ("query", "mutation"):
                raise GraphQLSyntaxError(f"Syntax Error: unsupported operation {kind!r}")
            nxt = self.peek()
            if nxt is not None and nxt[0] == "name":
                name = self.take(kind="name")
        fields = self.selection_set()
        if self.peek() is not None:
            raise GraphQLSyntaxError("Syntax Error: only one operation per document is supported")
        return Operation(kind, name, fields)

    def selection_set(self) -> tuple[Field, ...]:
        self.take("{")
        fields: list[Field] = []
        while not self.at("}"):
            fields.append(self.field())
        self.take("}")
        if not fields:
            raise GraphQLSyntaxError("Syntax Error: empty selection set")
        return tuple(fields)

    def field(self) -> Field:
        name = self.take(kind="name")
        args: dict[str, Any] = {}
        if self.at("("):
            self.take("(")
            while not self.at(")"):
                key = self.take(kind="name")
                self.take(":")
                args[key] = self.value()
            self.take(")")
        selections = self.selection_set() if self.at("{") else ()
        return Field(name, args, selections)

    def value(self) -> Any:
        tok = self.peek()
        if tok is None:
            raise GraphQLSyntaxError("Syntax Error: Expected value, found end of document")
        kind, text = tok
        if kind == "string":
            self.i += 1
            return json.loads(text)
        if kind == "number":
            self.i += 1
            return float(text) if any(c in text for c in ".eE") else int(text)
        if kind == "name":
            self.i += 1
            return {"true": True, "false": False, "null": None}.get(text, Enum(text))
        if text == "[":
            self.take("[")
            items = []
            while not self.at("]"):
                items.append(self.value())
            self.take("]")
            return items
        if text == "{":
            self.take("{")
            obj: dict[str, Any] = {}
            while not self.at("}"):
                key = self.take(kind="name")
                self.take(":")
                obj[key] = self.value()
            self.take("}")
            return obj
        raise GraphQLSyntaxError(f"Syntax Error: Unexpected {text!r}")


def parse(text: str) -> Operation:
    """Parse one GraphQL operation."""
    return _Parser(text).operation()


Schema = Mapping[str, Mapping[str, "str | None"]]
"""type name -> field name -> the field's object type (None for scalars)."""


def project(value: Any, selections: tuple[Field, ...], type_name: str, schema: Schema) -> Any:
    """Check ``selections`` against ``schema`` (even where ``value`` is empty or null), then keep only
    the selected fields of ``value`` (a dict, a list of dicts, or a scalar)."""
    fields = schema[type_name]
    for f in selections:
        if f.name not in fields:
            raise GraphQLFieldError(f'Cannot query field "{f.name}" on type "{type_name}".')
        nested = fields[f.name]
        if nested is None and f.selections:
            raise GraphQLFieldError(f'Field "{f.name}" must not have a selection since type is a scalar.')
        if nested is not None and not f.selections:
            raise GraphQLFieldError(
                f'Field "{f.name}" of type "{nested}" must have a selection of subfields.'
            )
    if value is None:
        return None
    if isinstance(value, list):
        return [project(v, selections, type_name, schema) for v in value]
    out: dict[str, Any] = {}
    for f in selections:
        nested = fields[f.name]
        out[f.name] = (
            value.get(f.name) if nested is None else project(value.get(f.name), f.selections, nested, schema)
        )
    return out
