"""The JSON schemas a model gives `ask_user`: data that a person's input is checked against, never a fetch.

A schema comes from a model, which may have read text an attacker wrote, so it is held to a policy when
the model calls the tool (schema_problem; a refused schema is an error result the model sees, and nothing
pauses) and checking input against it (input_errors) can neither reach outside nor take long:

- References are local only: `$ref` (and `$dynamicRef`, `$recursiveRef`) must be `#` or a JSON pointer
  `#/...` into the schema itself, and must point at a valid schema there. Identifiers that move the base
  URI or name anchors (`$id`, draft 4's `id`, `$anchor`, `$dynamicAnchor`, `$recursiveAnchor`) are
  refused, so that `#/...` always means this document. The reference registry's retrieve refuses every
  URI, so even a reference this check missed could not fetch anything.
- A reference cycle is refused (a schema that refers to itself in place would recurse forever; a
  question to a person has no need for recursive types), and so is a schema too large: over MAX_BYTES
  serialized, nested deeper than MAX_DEPTH, or more than MAX_EXPANDED subschemas (or deeper than
  MAX_DEPTH subschemas) with its references followed, so a few references cannot multiply the work.
- `pattern`, `patternProperties` and `additionalProperties` (which reads the patterns too) match with
  RE2, whose time is linear in the input; a pattern RE2 cannot compile (lookaround, backreferences) is
  refused. `unevaluatedProperties` in a schema with `patternProperties` is refused (jsonschema would
  match those patterns with Python's backtracking engine there). `uniqueItems` compares by hashing,
  not pair by pair.
- Formats: only cheap, linear ones are checked (FORMATS); any other `format` is an annotation.
- Dialects: 2020-12 (when `$schema` names none), 2019-09, draft 7, 6 and 4; any other `$schema` is refused.
"""

import functools
import json

import re2
from jsonschema import FormatChecker, ValidationError
from jsonschema.exceptions import SchemaError
from jsonschema.validators import (
    Draft4Validator,
    Draft6Validator,
    Draft7Validator,
    Draft201909Validator,
    Draft202012Validator,
    extend,
)
from referencing import Registry
from referencing.exceptions import NoSuchResource, Unresolvable
from referencing.jsonschema import specification_with

MAX_BYTES = 64 * 1024  # the schema as compact JSON, non-ASCII characters escaped
MAX_DEPTH = 32  # nesting of the schema's JSON; also of its subschemas with references followed
MAX_EXPANDED = 10_000  # subschemas with references followed (each time they are referred to)
FORMATS = ("date", "email", "idn-email", "ipv4", "ipv6", "uuid")  # each a linear check in the standard library
REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
DIALECTS = (Draft202012Validator, Draft201909Validator, Draft7Validator, Draft6Validator, Draft4Validator)


class UnusableSchema(ValueError):
    """A schema the policy refuses (a stored one from before the policy, when input is checked against it)."""


def _re2_options():
    options = re2.Options()
    options.log_errors = False  # a refused pattern is the model's error, not a line in the sidecar's log
    options.never_capture = True  # only whether it matches counts
    return options


_RE2_OPTIONS = _re2_options()


@functools.lru_cache(maxsize=512)
def _regex(pattern: str):
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        raise UnusableSchema(f"the pattern {pattern!r} is not supported (RE2 syntax: no lookaround, no "
                             f"backreferences): {reason}") from None


def _pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not _regex(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, patterns, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        regex = _regex(pattern)
        for key, value in instance.items():
            if regex.search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: dict, schema: dict) -> list[str]:
    properties = schema.get("properties", {})
    regexes = [_regex(pattern) for pattern in schema.get("patternProperties", {})]
    return [key for key in instance if key not in properties and not any(r.search(key) for r in regexes)]


def _additional_properties(validator, additional, instance, schema):
    # jsonschema's own, but it finds the additional properties with Python's re.
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            yield ValidationError(f"{', '.join(map(repr, sorted(extras)))} {verb} not match any of the regexes: "
                                  f"{', '.join(map(repr, sorted(schema['patternProperties'])))}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({', '.join(map(repr, extras))} {verb} "
                                  "unexpected)")


def _identity(value):
    """A hashable form of JSON data, equal exactly when JSON Schema calls the values equal (1 == 1.0,
    true != 1, objects whatever their order)."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, list):
        return ("array", tuple(_identity(item) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((key, _identity(item)) for key, item in value.items()))
    return ("string", value)


def _unique_items(validator, unique, instance, schema):
    # jsonschema compares unhashable items pair by pair: quadratic in the number of items.
    if unique and validator.is_type(instance, "array"):
        seen = set()
        for item in instance:
            identity = _identity(item)
            if identity in seen:
                yield ValidationError(f"the items are not unique: {item!r} is there more than once")
                return
            seen.add(identity)


_LINEAR = {"pattern": _pattern, "patternProperties": _pattern_properties,
           "additionalProperties": _additional_properties, "uniqueItems": _unique_items}
_VALIDATORS = {cls.META_SCHEMA["$schema"].rstrip("#"): extend(cls, _LINEAR) for cls in DIALECTS}
_FORMAT_CHECKER = FormatChecker(formats=FORMATS)


def _refuse_retrieval(uri: str):
    raise NoSuchResource(ref=uri)


def _validator_class(schema: dict):
    dialect = schema.get("$schema", Draft202012Validator.META_SCHEMA["$schema"])
    cls = _VALIDATORS.get(dialect.rstrip("#")) if isinstance(dialect, str) else None
    if cls is None:
        raise UnusableSchema(f"$schema {dialect!r} is not a supported dialect (2020-12, 2019-09, draft 7, 6, 4)")
    return cls


def _json_depth(value) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            break
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children)
    return deepest


class _Walk:
    """Every subschema, with references followed: refuses what the policy refuses, compiles every pattern,
    and counts the subschemas the references expand to (each node once: memoized)."""

    def __init__(self, cls, schema: dict):
        self.cls = cls
        self.specification = specification_with(cls.META_SCHEMA["$schema"])
        resource = self.specification.create_resource(schema)
        self.resolver = Registry(retrieve=_refuse_retrieval).with_resource("", resource).resolver("")
        self.expanded: dict[int, int] = {}
        self.open: set[int] = set()
        self.keywords: set[str] = set()  # of every subschema, for the combinations refused

    def check(self, schema: dict) -> None:
        self.size(schema)
        if {"patternProperties", "unevaluatedProperties"} <= self.keywords:
            raise UnusableSchema("unevaluatedProperties cannot be combined with patternProperties")

    def size(self, node, depth: int = 1) -> int:
        if not isinstance(node, dict):
            return 1
        if depth > MAX_DEPTH:
            raise UnusableSchema(f"the schema is nested deeper than {MAX_DEPTH} subschemas with its references "
                                 "followed")
        key = id(node)
        if key in self.expanded:
            return self.expanded[key]
        if key in self.open:
            raise UnusableSchema("the schema's references form a cycle (a schema that refers to itself)")
        self.open.add(key)
        self._check_node(node)
        total = 1
        for child in [*self.specification.subresources_of(node), *self._targets(node)]:
            total += self.size(child, depth + 1)
            if total > MAX_EXPANDED:
                raise UnusableSchema(f"the schema has more than {MAX_EXPANDED} subschemas with its references "
                                     "followed")
        self.open.discard(key)
        self.expanded[key] = total
        return total

    def _check_node(self, node: dict) -> None:
        if self.specification.id_of(node) is not None or list(self.specification.anchors_in(node)):
            raise UnusableSchema("identifiers and anchors ($id, id, $anchor, $dynamicAnchor, $recursiveAnchor) "
                                 "are not supported: refer to parts of the schema with #/ JSON pointers")
        if isinstance(node.get("pattern"), str):
            _regex(node["pattern"])
        if isinstance(node.get("patternProperties"), dict):
            for pattern in node["patternProperties"]:
                _regex(pattern)
        self.keywords.update(node)

    def _targets(self, node: dict) -> list:
        targets = []
        for keyword in REFERENCES:
            reference = node.get(keyword)
            if reference is None:
                continue
            if not isinstance(reference, str) or not (reference == "#" or reference.startswith("#/")):
                raise UnusableSchema(f"{keyword} {reference!r} is not a local reference: only #/... JSON pointers "
                                     "into the schema itself are followed, nothing is fetched")
            try:
                target = self.resolver.lookup(reference).contents
            except Unresolvable:
                raise UnusableSchema(f"{keyword} {reference!r} points at nothing in the schema") from None
            if not isinstance(target, dict | bool):
                raise UnusableSchema(f"{keyword} {reference!r} does not point at a schema")
            try:
                self.cls.check_schema(target)
            except SchemaError as exc:
                raise UnusableSchema(f"{keyword} {reference!r} does not point at a valid schema: {exc.message}") \
                    from None
            targets.append(target)
        return targets


def _checked(schema) -> type:
    """The validator class for a schema the policy accepts; UnusableSchema otherwise."""
    if not isinstance(schema, dict):
        raise UnusableSchema("the schema must be a JSON object")
    if _json_depth(schema) > MAX_DEPTH:
        raise UnusableSchema(f"the schema is nested deeper than {MAX_DEPTH} levels")
    if len(json.dumps(schema, separators=(",", ":"))) > MAX_BYTES:
        raise UnusableSchema(f"the schema is larger than {MAX_BYTES // 1024} KiB")
    cls = _validator_class(schema)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        raise UnusableSchema(f"not a valid JSON schema: {exc.message}") from None
    _Walk(cls, schema).check(schema)
    return cls


def schema_problem(schema) -> str | None:
    """Why `schema` is not a schema ask_user may use, or None."""
    try:
        _checked(schema)
    except UnusableSchema as exc:
        return str(exc)
    return None


def input_errors(schema, value) -> dict[str, list[str]]:
    """Every way `value` breaks `schema`, as the contract's flat errors: `input.<path>` -> messages.

    Raises UnusableSchema for a schema the policy refuses (one stored before it held)."""
    cls = _checked(schema)
    validator = cls(schema, format_checker=_FORMAT_CHECKER, registry=Registry(retrieve=_refuse_retrieval))
    found: dict[str, list[str]] = {}
    errors = sorted(validator.iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path])
    for error in errors:
        field = ".".join(["input", *(str(p) for p in error.absolute_path)])
        found.setdefault(field, []).append(error.message)
    return found
