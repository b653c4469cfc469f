"""validate_json_schema.py SCHEMA DOC: is the JSON document DOC valid under SCHEMA?

Exit 0: valid.  1: invalid, each reason on stderr as "at /json/pointer: message".
2: anything else (usage, a file unreadable or not JSON, a schema of no known
draft, jsonschema missing), so that a broken setup can never pass for a
document the schema rejected.

The tests run it with Debian's /usr/bin/python3 and python3-jsonschema.
"""

import json
import sys

MAX_REASONS = 20
MAX_REASON_LEN = 300


def fail(status, message):
    print(f"validate_json_schema: {message}", file=sys.stderr)
    sys.exit(status)


def no_constant(name):
    # Python's json takes NaN and Infinity, which JSON has not; the schema
    # would see them as numbers.
    raise ValueError(f"{name} is not JSON")


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f, parse_constant=no_constant)
    except (OSError, ValueError) as e:
        fail(2, f"{path}: {e}")


def pointer(path):
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in path)


def report(error, indent):
    message = error.message
    if len(message) > MAX_REASON_LEN:
        message = message[:MAX_REASON_LEN] + "..."
    print(f"{indent}at {pointer(error.absolute_path)}: {message}", file=sys.stderr)


def main(argv):
    if len(argv) != 3:
        fail(2, "usage: validate_json_schema.py SCHEMA DOC")
    try:
        from jsonschema import exceptions, validators
    except ImportError as e:
        fail(2, f"{e} (Debian: apt-get install python3-jsonschema)")
    schema, doc = load(argv[1]), load(argv[2])
    # The draft the schema declares decides the rules; one it does not declare
    # would be guessed, so it is refused rather than validated by the wrong ones.
    if not isinstance(schema, dict) or "$schema" not in schema:
        fail(2, f"{argv[1]}: no $schema naming its draft")
    cls = validators.validator_for(schema, default=None)
    if cls is None:
        fail(2, f"{argv[1]}: unknown draft {schema['$schema']!r}")
    try:
        cls.check_schema(schema)
    except exceptions.SchemaError as e:
        fail(2, f"{argv[1]}: not a valid {cls.__name__} schema: {e.message}")
    errors = sorted(cls(schema).iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    for e in errors[:MAX_REASONS]:
        report(e, "")
        # Under anyOf and the like the reason is in why each branch failed.
        for sub in e.context[:MAX_REASONS]:
            report(sub, "  ")
    if len(errors) > MAX_REASONS:
        print(f"... and {len(errors) - MAX_REASONS} more", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except Exception as e:  # a crash exits 1 by default, which would read as "invalid"
        fail(2, f"{type(e).__name__}: {e}")
