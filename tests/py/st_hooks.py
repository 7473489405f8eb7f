"""tests/py/st_hooks.py - schemathesis hooks for tests/py/test_schemathesis.py
(loaded through SCHEMATHESIS_HOOKS=st_hooks): a serializer for the
application/x-ndjson bodies of POST /v1/worker/results (schema: a string),
sent as its UTF-8 bytes (lone surrogates that the generator may produce are
replaced, as a real client could not send them either)."""
import schemathesis


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value):
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        import json
        value = json.dumps(value)
    return value.encode("utf-8", "replace")
