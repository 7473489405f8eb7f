#!/usr/bin/env python3
"""tests/oracle/make_gram_corpus.py - the JSON Schema corpus of common/gram's
compiler, labelled by Python's jsonschema (the independent oracle).

usage: .venv/bin/python tests/oracle/make_gram_corpus.py   (jsonschema==4.26.0,
       scripts/requirements-test.txt) -> tests/fixtures/gram/corpus.json

Each schema comes with candidate instances, written as JSON text in the form
our grammars produce (compact, at most one space after ':' and ',', object
members in the schema's property order). jsonschema (Draft 2020-12, with
format checking) labels each instance valid or invalid; the C test
(tests/unit/common/test_gram_corpus.c) requires the compiled grammar to
accept exactly the valid ones, except instances flagged "outside": valid
JSON our deliberately narrower language leaves out (exponents, more than
15 digits, Feb 29th...), which must then be rejected (never the other way:
accepting an invalid instance is always a failure).
"""
import json
import os
import sys

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "fixtures", "gram", "corpus.json")

# (name, schema, [instance text, ...], [outside-the-subset valid texts, ...])
CORPUS = [
    ("person", {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
                       "email": {"type": "string", "format": "email"}},
        "required": ["name", "age", "email"], "additionalProperties": False},
     ['{"name":"Ann","age":31,"email":"ann@example.com"}', '{"name": "B\\u00e9a", "age": 0, "email": "b@x.io"}',
      '{"name":"","age":150,"email":"a.b+c@d-e.fr"}', '{"name":"Ann","age":151,"email":"a@b.co"}',
      '{"name":"Ann","age":-1,"email":"a@b.co"}', '{"name":"Ann","age":3}',
      '{"name":"Ann","age":3.5,"email":"a@b.co"}', '{"name":"Ann","age":3,"email":"a@b.co","x":1}',
      '{"name":5,"age":3,"email":"a@b.co"}', '{"name":"Ann","age":"3","email":"a@b.co"}'],
     ['{"name":"Ann","age":31,"email":"ann"}', '{"name":"Ann","age":3E1,"email":"a@b.co"}',
      '{"age":3,"name":"Ann","email":"a@b.co"}', '{"name":"Ann","age":3,"email":"a@b.co"}  ']),
    ("optional_members", {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"type": "null"}},
        "required": ["b"]},
     ['{"b":true}', '{"a":1,"b":false}', '{"b":true,"c":null}', '{"a":-7,"b":true,"c":null}', '{}',
      '{"a":1}', '{"a":1,"c":null}', '{"b":1}', '{"b":true,"c":0}', '{"a":1.5,"b":true}'],
     ['{"b":true,"a":1}', '{"b":true,"zzz":1}']),
    ("bounded_array_enum", {
        "type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 3},
     ['["red"]', '["red", "blue", "red"]', '["green","green"]', '[]', '["red","red","red","red"]', '["pink"]',
      '[1]', '["Red"]'],
     []),
    ("nested", {
        "type": "object",
        "properties": {
            "id": {"type": "string", "format": "uuid"},
            "items": {"type": "array", "items": {
                "type": "object",
                "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                               "qty": {"type": "integer", "minimum": 1, "maximum": 999},
                               "price": {"type": "number", "minimum": 0, "maximum": 10000}},
                "required": ["sku", "qty", "price"], "additionalProperties": False}, "maxItems": 4}},
        "required": ["id", "items"], "additionalProperties": False},
     ['{"id":"123e4567-e89b-12d3-a456-426614174000","items":[]}',
      '{"id":"123e4567-e89b-12d3-a456-426614174000","items":[{"sku":"ABC-1234","qty":2,"price":9.99}]}',
      '{"id":"123e4567-e89b-12d3-a456-426614174000","items":[{"sku":"ABC-1234","qty":2,"price":10000}]}',
      '{"id":"123e4567-e89b-12d3-a456-426614174000","items":[{"sku":"ABC-1234","qty":2,"price":10000.5}]}',
      '{"id":"123e4567-e89b-12d3-a456-426614174000","items":[{"sku":"AB-1234","qty":2,"price":1}]}',
      '{"id":"123e4567-e89b-12d3-a456-426614174000","items":[{"sku":"ABC-1234","qty":0,"price":1}]}',
      '{"id":"123e4567-e89b-12d3-a456-426614174000","items":[{"sku":"ABC-1234","qty":1,"price":-0.5}]}',
      '{"id":"not-a-uuid","items":[]}'],
     ['{"id":"123E4567-E89B-12D3-A456-426614174000","items":[]}',
      '{"id":"123e4567-e89b-12d3-a456-426614174000","items":[{"sku":"ABC-1234","qty":2,"price":9.90}]}']),
    ("anyof_nullable", {
        "type": "object",
        "properties": {"v": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer", "exclusiveMinimum": 10}]},
                       "w": {"type": ["number", "null"], "exclusiveMaximum": 2.5}},
        "required": ["v", "w"], "additionalProperties": False},
     ['{"v":"abc","w":null}', '{"v":11,"w":2}', '{"v":"","w":-3.25}', '{"v":"abcd","w":null}', '{"v":10,"w":null}',
      '{"v":"a","w":2.5}', '{"v":"a","w":3}', '{"v":null,"w":null}'],
     ['{"v":"a","w":2.4}']),
    ("recursive_tree", {
        "$defs": {"node": {"type": "object",
                           "properties": {"label": {"type": "string", "enum": ["a", "b"]},
                                          "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                           "required": ["label", "children"], "additionalProperties": False}},
        "$ref": "#/$defs/node"},
     ['{"label":"a","children":[]}', '{"label":"a","children":[{"label":"b","children":[{"label":"a","children":[]}]}]}',
      '{"label":"c","children":[]}', '{"label":"a","children":[{"label":"b"}]}', '{"label":"a","children":{}}'],
     []),
    ("root_recursion", {
        "type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
        "required": ["next"], "additionalProperties": False},
     ['{"next":null}', '{"next":{"next":{"next":null}}}', '{"next":{}}', '{"next":1}'],
     []),
    ("dates_and_times", {
        "type": "object",
        "properties": {"d": {"type": "string", "format": "date"}, "t": {"type": "string", "format": "date-time"}},
        "required": ["d", "t"], "additionalProperties": False},
     ['{"d":"2024-01-31","t":"2024-01-31T23:59:59Z"}', '{"d":"1999-12-01","t":"2000-06-30T00:00:00.123+05:30"}',
      '{"d":"2024-02-30","t":"2024-01-31T23:59:59Z"}', '{"d":"2024-13-01","t":"2024-01-31T23:59:59Z"}',
      '{"d":"2024-04-31","t":"2024-01-31T23:59:59Z"}', '{"d":"24-01-01","t":"2024-01-31T23:59:59Z"}'],
     ['{"d":"2024-02-29","t":"2024-01-31T23:59:59Z"}', '{"d":"2024-01-31","t":"2024-01-31t23:59:59z"}']),
    ("const_and_strings", {
        "type": "object",
        "properties": {"kind": {"const": "invoice"}, "code": {"type": "string", "minLength": 2, "maxLength": 4},
                       "ip": {"type": "string", "format": "ipv4"}},
        "required": ["kind", "code", "ip"], "additionalProperties": False},
     ['{"kind":"invoice","code":"ab","ip":"10.0.0.255"}', '{"kind":"invoice","code":"\\"\\\\\\n\\u00e9","ip":"1.2.3.4"}',
      '{"kind":"receipt","code":"ab","ip":"1.2.3.4"}', '{"kind":"invoice","code":"a","ip":"1.2.3.4"}',
      '{"kind":"invoice","code":"abcde","ip":"1.2.3.4"}', '{"kind":"invoice","code":"ab","ip":"256.1.1.1"}'],
     ['{"kind":"invoice","code":"ab","ip":"01.2.3.4"}']),
    ("map_of_integers", {"type": "object", "additionalProperties": {"type": "integer", "minimum": -3, "maximum": 3}},
     ['{}', '{"x":1,"y":-3}', '{"x":4}', '{"x":"1"}'],
     []),
    ("unanchored_pattern", {"type": "string", "pattern": "[0-9]{3}"},
     ['"abc123def"', '"123"', '"12"', '"a1b2c3"'],
     []),
    ("enum_mixed", {"enum": ["a", 1, None, True, {"k": [1, 2]}]},
     ['"a"', '1', 'null', 'true', '{"k":[1,2]}', '"b"', '2', 'false', '{"k":[2,1]}'],
     []),
    ("integer_wide_range", {"type": "integer", "minimum": -1000000, "maximum": 12345678},
     ['-1000000', '12345678', '0', '-999999', '7777777', '-1000001', '12345679', '99999999'],
     []),
    ("number_fraction_bounds", {"type": "number", "minimum": 0.5, "maximum": 3.5},
     ['1', '3', '1.25', '2.999', '0.4', '3.6', '4'],
     ['0.5', '3.5', '0.75', '3.25']),
    ("any_value", {},
     ['{}', '[1, "a", {"b": null}]', '"x"', '-0.5', 'true', 'null'],
     ['1e5']),
]


def main():
    v_cls = jsonschema.Draft202012Validator
    out = []
    for name, schema, texts, outside in CORPUS:
        v_cls.check_schema(schema)
        v = v_cls(schema, format_checker=v_cls.FORMAT_CHECKER)
        cases = []
        for t, is_out in [(t, False) for t in texts] + [(t, True) for t in outside]:
            inst = json.loads(t)
            valid = v.is_valid(inst)
            # an "outside" text that turned out invalid is an ordinary case
            cases.append({"text": t, "valid": valid, "outside": is_out and valid})
        n_valid = sum(c["valid"] for c in cases)
        if n_valid == 0 or n_valid == len(cases) and name != "any_value":
            print(f"{name}: needs both valid and invalid instances", file=sys.stderr)
        out.append({"name": name, "schema": json.dumps(schema, separators=(",", ":")), "cases": cases})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"generator": "tests/oracle/make_gram_corpus.py", "jsonschema": "4.26.0",
                   "schemas": out}, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {len(out)} schemas, {sum(len(s['cases']) for s in out)} instances")


if __name__ == "__main__":
    main()
