"""Structured-output workloads shared by tests/py/test_structured.py and the
constrained-vs-unconstrained benchmark (tests/bench/structured_bench.py):
twelve JSON Schemas covering what spec/structured-outputs.md supports
(nested objects, bounded arrays, enums, patterns, formats, anyOf, nullable
type arrays, $defs/$ref with recursion, numeric bounds), plus choice and
regex constraints, and batch input lines over them.

Every schema bounds its strings and arrays, so a small model always reaches
the end of the grammar well within max_tokens."""
import json

SMALL_PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                                  "age": {"type": "integer", "minimum": 0, "maximum": 120}},
                "required": ["name", "age"], "additionalProperties": False}

SCHEMAS = [
    ("sentiment", "Classify the sentiment of: 'I loved the movie, but the ending was weak.'", {
        "type": "object",
        "properties": {"label": {"type": "string", "enum": ["positive", "negative", "neutral"]},
                       "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
        "required": ["label", "confidence"], "additionalProperties": False}),
    ("person", "Invent a person with a name, an age and an email address.", {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 30},
                       "age": {"type": "integer", "minimum": 0, "maximum": 120},
                       "email": {"type": "string", "format": "email"}},
        "required": ["name", "age", "email"], "additionalProperties": False}),
    ("address", "Give a postal address in the United States.", {
        "type": "object",
        "properties": {"street": {"type": "string", "maxLength": 40},
                       "city": {"type": "string", "maxLength": 30},
                       "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                       "country": {"type": "string", "enum": ["US", "CA", "MX"]}},
        "required": ["street", "city", "zip", "country"], "additionalProperties": False}),
    ("order", "Write an order of one to three products.", {
        "type": "object",
        "properties": {"items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
            "type": "object",
            "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"},
                           "qty": {"type": "integer", "minimum": 1, "maximum": 20}},
            "required": ["sku", "qty"], "additionalProperties": False}},
            "express": {"type": "boolean"}},
        "required": ["items", "express"], "additionalProperties": False}),
    ("event", "Describe a concert: its title and when it starts.", {
        "type": "object",
        "properties": {"title": {"type": "string", "maxLength": 40},
                       "day": {"type": "string", "format": "date"},
                       "starts": {"type": "string", "format": "date-time"}},
        "required": ["title", "day", "starts"], "additionalProperties": False}),
    ("tags", "List a few tags for a blog post about gardening.", {
        "type": "object",
        "properties": {"tags": {"type": "array", "minItems": 1, "maxItems": 4,
                                "items": {"type": "string", "maxLength": 12}}},
        "required": ["tags"], "additionalProperties": False}),
    ("result", "Report the result of dividing 10 by 2, or an error.", {
        "type": "object",
        "properties": {"result": {"anyOf": [
            {"type": "object", "properties": {"ok": {"const": True},
                                              "value": {"type": "integer", "minimum": 0, "maximum": 1000}},
             "required": ["ok", "value"], "additionalProperties": False},
            {"type": "object", "properties": {"ok": {"const": False},
                                              "error": {"type": "string", "maxLength": 30}},
             "required": ["ok", "error"], "additionalProperties": False}]}},
        "required": ["result"], "additionalProperties": False}),
    ("tree", "Draw a small family tree.", {
        "$defs": {"node": {"type": "object",
                           "properties": {"name": {"type": "string", "maxLength": 10},
                                          "children": {"type": "array", "maxItems": 2,
                                                       "items": {"$ref": "#/$defs/node"}}},
                           "required": ["name", "children"], "additionalProperties": False}},
        "$ref": "#/$defs/node"}),
    ("profile", "Give a user profile; unknown fields are null.", {
        "type": "object",
        "properties": {"nickname": {"type": ["string", "null"], "maxLength": 15},
                       "score": {"type": ["integer", "null"], "minimum": -100, "maximum": 100},
                       "verified": {"type": "boolean"}},
        "required": ["nickname", "score", "verified"], "additionalProperties": False}),
    ("record", "Create a database record with an id.", {
        "type": "object",
        "properties": {"id": {"type": "string", "format": "uuid"}, "active": {"type": "boolean"},
                       "ratio": {"type": "number", "minimum": -1, "maximum": 1}},
        "required": ["id", "active", "ratio"], "additionalProperties": False}),
    ("company", "Extract the company and year: 'Acme Corp was founded in 1947.'", {
        "type": "object",
        "properties": {"company": {"type": "string", "maxLength": 40},
                       "year": {"type": "integer", "minimum": 1800, "maximum": 2100}},
        "required": ["company", "year"], "additionalProperties": False}),
    ("transfer", "Two people exchange a gift: who gives it to whom?", {
        "$defs": {"p": SMALL_PERSON},
        "type": "object",
        "properties": {"from": {"$ref": "#/$defs/p"}, "to": {"$ref": "#/$defs/p"},
                       "gift": {"type": "string", "maxLength": 20}},
        "required": ["from", "to", "gift"], "additionalProperties": False}),
]

CHOICES = ["yes", "no", "maybe"]
REGEX = "[A-Z][a-z]{2,8} [0-9]{1,3}"
MAX_TOKENS = 400


def body_for(i, constrained=True, model="smollm"):
    """(url, body, kind, spec) of line i: 12 schemas (chat; every 4th line of
    them via /v1/completions with guided_json), then a choice line and a regex
    line in every 14."""
    k = i % 14
    temp = {"temperature": 0} if i % 2 == 0 else {"temperature": 0.8, "seed": i}
    if k < 12:
        name, prompt, schema = SCHEMAS[k]
        if (i // 14) % 4 == 3:
            body = {"model": model, "prompt": f"{prompt}\nAnswer in JSON:\n", "max_tokens": MAX_TOKENS, **temp}
            if constrained:
                body["guided_json"] = schema
            return "/v1/completions", body, "json", schema
        body = {"model": model, "messages": [{"role": "user", "content": f"{prompt} Answer in JSON."}],
                "max_tokens": MAX_TOKENS, **temp}
        if constrained:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": name, "strict": True, "schema": schema}}
        return "/v1/chat/completions", body, "json", schema
    if k == 12:
        body = {"model": model, "messages": [{"role": "user", "content": f"Is {i} an even number? yes or no."}],
                "max_tokens": 8, **temp}
        if constrained:
            body["guided_choice"] = CHOICES
        return "/v1/chat/completions", body, "choice", CHOICES
    body = {"model": model, "prompt": f"Name a city and a number ({i}):", "max_tokens": 16, **temp}
    if constrained:
        body["guided_regex"] = REGEX
    return "/v1/completions", body, "regex", REGEX


def lines(n, constrained=True, model="smollm"):
    out = []
    for i in range(n):
        url, body, _, _ = body_for(i, constrained, model)
        out.append(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": url, "body": body}))
    return out


def output_text(resp_body):
    ch = resp_body["choices"][0]
    return (ch["message"]["content"] if "message" in ch else ch["text"]), ch["finish_reason"]
