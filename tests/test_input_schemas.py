"""The policy on schemas a model gives ask_user, pure: local references only, nothing fetched, bounded size,
and checking input in time linear in the input (RE2 for patterns, hashing for uniqueItems)."""

import time

import pytest

from sidecar.domain.input_schemas import MAX_BYTES, UnusableSchema, input_errors, schema_problem
from tests.support.network import CannedServer

REDOS_PATTERN = "^(a+)+$"
REDOS_INPUT = "a" * 26 + "!"  # about 14 s of backtracking in Python's re; RE2 answers at once
LINEAR_BOUND_SECONDS = 1.0  # generous: the work is a few milliseconds on a busy machine


def _doubling(levels: int) -> dict:
    """Each definition refers to the next one twice: 2**levels subschemas once the references are followed."""
    defs = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]} for i in range(levels)}
    return {"$defs": {**defs, f"d{levels}": {"type": "string"}}, "$ref": "#/$defs/d0"}


def _nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


REFUSED = [
    ("http reference", {"$ref": "http://127.0.0.1:9/secret.json"}, "not a local reference"),
    ("https reference", {"$ref": "https://example.org/s.json#/x"}, "not a local reference"),
    ("file reference", {"$ref": "file:///etc/passwd"}, "not a local reference"),
    ("relative reference", {"$ref": "other.json"}, "not a local reference"),
    ("urn reference", {"$ref": "urn:uuid:8d2a0c3e-54f1-4c6b-9a3a-2a4f5e6d7c8b"}, "not a local reference"),
    ("anchor reference", {"$ref": "#name"}, "not a local reference"),
    ("nested remote reference", {"properties": {"a": {"items": {"$ref": "http://127.0.0.1:9/"}}}},
     "not a local reference"),
    ("remote reference in definitions", {"$defs": {"x": {"$ref": "http://127.0.0.1:9/"}}}, "not a local reference"),
    ("$id that moves the base", {"$id": "http://127.0.0.1:9/", "$ref": "#/$defs/x", "$defs": {"x": {}}},
     "identifiers and anchors"),
    ("embedded $id to refer to", {"$defs": {"x": {"$id": "http://127.0.0.1:9/s.json"}},
                                  "$ref": "http://127.0.0.1:9/s.json"}, "not a local reference"),
    ("$anchor", {"$defs": {"x": {"$anchor": "here"}}}, "identifiers and anchors"),
    ("draft 4 id", {"$schema": "http://json-schema.org/draft-04/schema#", "id": "http://127.0.0.1:9/"},
     "identifiers and anchors"),
    ("$dynamicRef to outside", {"$dynamicRef": "http://127.0.0.1:9/#meta"}, "not a local reference"),
    ("$recursiveRef", {"$schema": "https://json-schema.org/draft/2019-09/schema", "$recursiveRef": "#"},
     "cycle"),
    ("reference that is not a string", {"$ref": 5}, "not a valid JSON schema"),
    ("missing definition", {"$ref": "#/$defs/missing"}, "points at nothing"),
    ("missing definition, nested", {"properties": {"a": {"$ref": "#/definitions/none"}}}, "points at nothing"),
    ("reference to a non-schema", {"$ref": "#/properties/a/minLength", "properties": {"a": {"minLength": 1}}},
     "does not point at a schema"),
    ("reference to a bad schema", {"$ref": "#/properties", "properties": {"pattern": {"type": "string"}}},
     "does not point at a valid schema"),
    ("root cycle", {"$ref": "#"}, "cycle"),
    ("cycle through definitions", {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"$ref": "#/$defs/a"}},
                                   "$ref": "#/$defs/a"}, "cycle"),
    ("references that multiply", _doubling(14), "more than 10000 subschemas"),
    ("long reference chain", {"$defs": {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(40)} | {"d40": {}},
                              "$ref": "#/$defs/d0"}, "nested deeper than 32 subschemas"),
    ("too deep", _nested(40), "nested deeper than 32 levels"),
    ("too large", {"enum": ["x" * 1000] * (MAX_BYTES // 1000 + 1)}, "larger than 64 KiB"),
    ("lookbehind", {"pattern": "(?<=a)b"}, "is not supported"),
    ("backreference", {"pattern": "(a)\\1"}, "is not supported"),
    ("lookahead in patternProperties", {"patternProperties": {"^(?!x)": {}}}, "is not supported"),
    ("unevaluatedProperties with patternProperties", {"patternProperties": {"^a": {}}, "unevaluatedProperties": False},
     "unevaluatedProperties cannot be combined"),
    ("unknown dialect", {"$schema": "http://127.0.0.1:9/schema"}, "not a supported dialect"),
    ("draft 3", {"$schema": "http://json-schema.org/draft-03/schema#"}, "not a supported dialect"),
    ("not a schema", {"type": "no-such-type"}, "not a valid JSON schema"),
    ("not an object", ["string"], "must be a JSON object"),
]


@pytest.mark.parametrize(("schema", "problem"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_a_schema_the_policy_refuses_says_why(schema, problem):
    found = schema_problem(schema)
    assert found is not None and problem in found, found
    with pytest.raises(UnusableSchema, match=problem):
        input_errors(schema, "anything")  # a stored schema is held to the same policy


ACCEPTED = [
    ("local definition", {"$defs": {"page": {"type": "integer"}}, "properties": {"p": {"$ref": "#/$defs/page"}}},
     {"p": 2}, {"p": "2"}),
    ("draft 7 definitions", {"$schema": "http://json-schema.org/draft-07/schema#",
                             "definitions": {"n": {"minimum": 1}}, "items": {"$ref": "#/definitions/n"}}, [1], [0]),
    ("draft 4", {"$schema": "http://json-schema.org/draft-04/schema#", "maxLength": 2}, "ab", "abc"),
    ("shared definition, no cycle", _doubling(8), "x", 5),
    ("pattern", {"type": "string", "pattern": "^[a-z]+-[0-9]{2}$"}, "page-42", "page-4"),
    ("patternProperties", {"patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False},
     {"x-a": 1}, {"y": 1}),
    ("propertyNames", {"propertyNames": {"pattern": "^[a-z]+$"}}, {"ab": 1}, {"A": 1}),
    ("email format", {"format": "email"}, "a@b.example", "nobody"),
    ("date format", {"format": "date"}, "2026-12-01", "2026-13-01"),
]


@pytest.mark.parametrize(("schema", "good", "bad"), [case[1:] for case in ACCEPTED], ids=[case[0] for case in ACCEPTED])
def test_a_schema_the_policy_accepts_checks_input_as_json_schema_says(schema, good, bad):
    assert schema_problem(schema) is None
    assert input_errors(schema, good) == {}
    assert input_errors(schema, bad) != {}


def test_formats_that_could_be_slow_are_annotations():
    assert input_errors({"format": "regex"}, "(((") == {}
    assert input_errors({"format": "hostname"}, "not a host name!") == {}


def test_nothing_is_fetched_when_the_schema_refers_outside():
    secret = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"enum": ["INTERNAL-SECRET"]}'
    with CannedServer(secret) as server:
        schema = {"$ref": f"{server.url}/secret.json"}
        assert "not a local reference" in schema_problem(schema)
        with pytest.raises(UnusableSchema) as refused:
            input_errors(schema, "x")
        assert "INTERNAL-SECRET" not in str(refused.value)
        assert server.requests == []


@pytest.mark.parametrize(("schema", "value"), [
    ({"type": "string", "pattern": REDOS_PATTERN}, REDOS_INPUT),
    ({"propertyNames": {"pattern": REDOS_PATTERN}}, {REDOS_INPUT: 1}),
    ({"patternProperties": {REDOS_PATTERN: {}}, "additionalProperties": False}, {REDOS_INPUT: 1}),
    ({"patternProperties": {REDOS_PATTERN: {"type": "string"}}}, {"a" * 20000: 1}),
    ({"type": "array", "uniqueItems": True}, [{"n": i} for i in range(20000)]),
], ids=["pattern", "propertyNames", "additionalProperties", "patternProperties", "uniqueItems"])
def test_checking_input_takes_time_linear_in_it_whatever_the_schema(schema, value):
    started = time.monotonic()
    errors = input_errors(schema, value)
    assert time.monotonic() - started < LINEAR_BOUND_SECONDS
    assert errors != {} or schema.get("uniqueItems")


def test_unique_items_compares_as_json_schema_does():
    schema = {"uniqueItems": True}
    assert input_errors(schema, [1, True, "1", None, False, 0]) == {}
    assert input_errors(schema, [{"a": 1, "b": [2]}, {"b": [2.0], "a": 1.0}]) != {}
    assert input_errors(schema, [[1, 2], [2, 1]]) == {}
