"""A form from a pause's JSON schema, and the input back from what the form sent.

An object of simple properties (string, integer, number, boolean, or an enum) becomes one field per
property; a simple schema one field; anything else a JSON text area. What the form sends is turned into
JSON as faithfully as a form can (numbers as numbers where they parse); the pause's schema, checked by the
decision service as for the API, then says what is wrong, by the field.
"""

import json
import re
from dataclasses import dataclass, field

SIMPLE = ("string", "integer", "number", "boolean")
PREFIX = "input"


@dataclass(frozen=True)
class FormField:
    name: str  # the form field's name, and the key of its errors (input.<property>, or input)
    label: str
    kind: str  # string | integer | number | boolean | enum | json | text
    required: bool = False
    description: str = ""
    options: list = field(default_factory=list)  # enum: the allowed values
    attrs: dict = field(default_factory=dict)  # hints for the browser (min, max, maxlength)


def _simple(schema) -> str | None:
    if not isinstance(schema, dict):
        return None
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return "enum"
    kind = schema.get("type")
    if kind == "string" and (schema.get("maxLength") or 0) > 200:
        return "text"
    return kind if kind in SIMPLE else None


def _attrs(schema: dict) -> dict:
    names = {"minimum": "min", "maximum": "max", "maxLength": "maxlength", "minLength": "minlength"}
    return {html: schema[key] for key, html in names.items() if isinstance(schema.get(key), int | float)}


def fields_for(schema) -> list[FormField]:
    if isinstance(schema, dict) and schema.get("type") == "object" and isinstance(schema.get("properties"), dict):
        properties = schema["properties"]
        if properties and all(_simple(p) for p in properties.values()):
            required = set(schema.get("required") or [])
            return [FormField(f"{PREFIX}.{name}", p.get("title") or name, _simple(p), name in required,
                              p.get("description", ""), list(p.get("enum") or []), _attrs(p))
                    for name, p in properties.items()]
    kind = _simple(schema)
    if kind:
        return [FormField(PREFIX, schema.get("title") or "Answer", kind, True, schema.get("description", ""),
                          list(schema.get("enum") or []), _attrs(schema))]
    return [FormField(PREFIX, "Answer (JSON)", "json", True, "Any JSON the schema below allows.")]


def _value(form_field: FormField, sent: str | None):
    if form_field.kind == "boolean":
        return sent == "on"
    if form_field.kind == "enum":
        try:
            return form_field.options[int(sent)]
        except (TypeError, ValueError, IndexError):
            return sent
    if form_field.kind in ("integer", "number"):
        try:
            number = float(sent)
            return int(number) if number.is_integer() and "." not in sent and "e" not in sent.lower() else number
        except (TypeError, ValueError):
            return sent  # the schema refuses it, by the field
    return sent


class NotJson(ValueError):
    pass


def input_from(fields: list[FormField], form) -> object:
    """The input the form sent; NotJson for a JSON text area that does not hold JSON."""
    if len(fields) == 1 and fields[0].name == PREFIX:
        only = fields[0]
        if only.kind == "json":
            try:
                return json.loads(form.get(PREFIX, ""))
            except ValueError as exc:
                raise NotJson(f"Not valid JSON: {exc}") from None
        return _value(only, form.get(PREFIX))
    value = {}
    for form_field in fields:
        sent = form.get(form_field.name)
        if form_field.kind != "boolean" and (sent is None or sent == "") and not form_field.required:
            continue  # left empty: not given
        value[form_field.name.removeprefix(PREFIX + ".")] = _value(form_field, sent if sent is not None else "")
    return value


REQUIRED = re.compile(r"^'(.+)' is a required property$")


def by_field(errors: dict[str, list[str]]) -> dict[str, str]:
    """The decision service's errors, keyed by form field: a missing property's message goes to its field."""
    shown: dict[str, list[str]] = {}
    for key, messages in (errors or {}).items():
        for message in messages:
            missing = REQUIRED.match(message) if key == PREFIX else None
            shown.setdefault(f"{PREFIX}.{missing.group(1)}" if missing else key, []).append(message)
    return {key: " ".join(messages) for key, messages in shown.items()}
