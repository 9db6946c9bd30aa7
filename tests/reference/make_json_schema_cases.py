"""Makes the JSON-schema grammar cases, labelled by Python's jsonschema (run once, commit the output).

    python3 tests/reference/make_json_schema_cases.py

Writes tests/data/json_schema/cases.json: a list of {"name", "schema", "cases": [[text,
valid, canonical], ...]}. `valid` is jsonschema's verdict (Draft 2020-12) on json.loads(text)
(NaN / Infinity refused, as JSON has none); `canonical` marks the documents this script built
from the schema in the form Sampan's grammar promises to admit (members in `properties` order,
no surrogate escapes, at most 16 integer / fraction digits, indentation up to 20). The rest are
one-byte mutations, truncations and reorderings of them. test_json_schema checks that the
grammar accepts no text jsonschema refuses, and every canonical one.
"""

import json
import os
import random

import jsonschema

SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "full name"},
            "age": {"type": "integer"},
            "email": {"type": "string", "format": "email"},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    },
    "enum_nullable": {
        "type": "object",
        "properties": {
            "color": {"enum": ["red", "green", "blue", 7, None]},
            "note": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}]},
            "ok": {"type": "boolean"},
        },
        "required": ["color", "note", "ok"],
    },
    "bounded_array": {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3},
    "tree": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
                },
                "required": ["v"],
            }
        },
        "$ref": "#/$defs/node",
    },
    "map": {"type": "object", "additionalProperties": {"type": "boolean"}},
    "any": {},
    "short_or_null": {"type": ["string", "null"], "minLength": 2, "maxLength": 4},
    "all_optional": {
        "type": "object",
        "properties": {
            "a": {"const": 1},
            "b": {"allOf": [{"type": "boolean"}]},
            "c": {"type": "string"},
            "d": {"type": "number"},
        },
    },
    "order": {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/definitions/Item"}},
            "total": {"type": "number"},
        },
        "required": ["items", "total"],
        "definitions": {
            "Item": {
                "type": "object",
                "properties": {"sku": {"type": "string", "minLength": 1}, "qty": {"type": "integer"}},
                "required": ["sku", "qty"],
                "additionalProperties": False,
            }
        },
    },
}

ALPHABET = ['"', "\\", "{", "}", "[", "]", ",", ":", " ", "\n", "0", "1", "-", ".", "e", "a",
            "t", "n", "u", "l", "é", "\t", "x", "7"]


def rand_string(rng, lo=0, hi=None):
    hi = lo + rng.randint(0, 6) if hi is None else rng.randint(lo, hi)
    pool = "abcXYZ 09-_/\"\\\n\té中😀\x01"
    return "".join(rng.choice(pool) for _ in range(hi))


def resolve(root, ref):
    node = root
    for part in ref[2:].split("/") if ref != "#" else []:
        node = node[part]
    return node


def instance(root, s, rng, depth=0):
    if s is True or s == {}:
        return rng.choice([1, "x", None, True, {"k": [1, 2.5]}, [], -3.25e-05])
    if "$ref" in s:
        return instance(root, resolve(root, s["$ref"]), rng, depth + 1)
    if "allOf" in s:
        return instance(root, s["allOf"][0], rng, depth + 1)
    if "anyOf" in s:
        return instance(root, rng.choice(s["anyOf"]), rng, depth + 1)
    if "const" in s:
        return s["const"]
    if "enum" in s:
        return rng.choice(s["enum"])
    t = s.get("type")
    if isinstance(t, list):
        t = rng.choice(t)
    if t is None:
        t = "object" if ("properties" in s or "additionalProperties" in s) else "array"
    if t == "string":
        return rand_string(rng, s.get("minLength", 0), s.get("maxLength", s.get("minLength", 0) + 6))
    if t == "integer":
        return rng.choice([0, 7, -12, 123456789012345, rng.randint(-10**6, 10**6)])
    if t == "number":
        return rng.choice([0, 1.5, -0.25, 3, 1e-05, 2.5e+20, round(rng.uniform(-100, 100), 6)])
    if t == "boolean":
        return rng.choice([True, False])
    if t == "null":
        return None
    if t == "array":
        lo = s.get("minItems", 0)
        hi = s.get("maxItems", lo + 3)
        if depth > 4:
            hi = lo
        n = rng.randint(lo, hi)
        return [instance(root, s.get("items", {}), rng, depth + 1) for _ in range(n)]
    props = s.get("properties", {})
    req = set(s.get("required", []))
    if not props:
        return {rand_string(rng, 1, 4): instance(root, s.get("additionalProperties", {}), rng,
                                                 depth + 1) for _ in range(rng.randint(0, 3))}
    out = {}
    for k, v in props.items():
        if k in req or (rng.random() < 0.6 and depth <= 4):
            out[k] = instance(root, v, rng, depth + 1)
    return out


def label(schema, text):
    def no_const(name):
        raise ValueError(name)
    try:
        doc = json.loads(text, parse_constant=no_const)
    except (ValueError, RecursionError):
        return False
    try:
        jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
        return True
    except jsonschema.ValidationError:
        return False


def main():
    rng = random.Random(20261129)
    out = []
    for name, schema in SCHEMAS.items():
        cases = {}
        for _ in range(40):
            doc = instance(schema, schema, rng)
            forms = [json.dumps(doc, separators=(",", ":"), ensure_ascii=False),
                     json.dumps(doc, ensure_ascii=False),
                     json.dumps(doc, indent=2, ensure_ascii=False)]
            for text in forms:
                assert label(schema, text), (name, text)
                canonical = "\\ud8" not in text and "\\ud9" not in text and "\\uda" not in text
                cases[text] = (True, canonical)
            # ensure_ascii: \u escapes, surrogate pairs included (valid, not promised).
            text = json.dumps(doc)
            cases.setdefault(text, (label(schema, text), False))
            base = forms[rng.randrange(3)].encode()
            for _ in range(25):
                b = bytearray(base)
                op = rng.randrange(4)
                pos = rng.randrange(len(b) + (1 if op == 1 else 0))
                ch = rng.choice(ALPHABET).encode()
                if op == 0 and b:
                    b[pos:pos + 1] = ch
                elif op == 1:
                    b[pos:pos] = ch
                elif op == 2 and b:
                    del b[pos]
                else:
                    b = b[:pos]
                try:
                    text = b.decode()
                except UnicodeDecodeError:
                    continue
                cases.setdefault(text, (label(schema, text), False))
            if isinstance(doc, dict) and len(doc) > 1:
                items = list(doc.items())
                rng.shuffle(items)
                text = json.dumps(dict(items), separators=(",", ":"), ensure_ascii=False)
                cases.setdefault(text, (label(schema, text), False))
        out.append({"name": name, "schema": schema,
                    "cases": [[t, v, c] for t, (v, c) in cases.items()]})
    path = os.path.join(os.path.dirname(__file__), "..", "data", "json_schema", "cases.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)
        f.write("\n")
    n = sum(len(s["cases"]) for s in out)
    v = sum(c[1] for s in out for c in s["cases"])
    print(f"{path}: {len(out)} schemas, {n} cases, {v} valid")


if __name__ == "__main__":
    main()
