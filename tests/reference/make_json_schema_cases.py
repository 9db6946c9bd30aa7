"""Makes the JSON-schema grammar cases, labelled by Python's jsonschema (run once, commit the output).

    python3 tests/reference/make_json_schema_cases.py

Writes tests/data/json_schema/cases.json: a list of {"name", "schema", "cases": [[text,
valid, canonical], ...]}. `valid` is jsonschema's verdict (Draft 2020-12, formats checked:
pip install fqdn rfc3339-validator) on json.loads(text)
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

from make_string_pattern_cases import rand_format

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
    "ranges": {
        "type": "object",
        "properties": {
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "temp": {"type": "number", "exclusiveMinimum": -50, "maximum": 60},
            "p": {"type": "number", "minimum": 0, "maximum": 1},
            "neg": {"type": "integer", "exclusiveMaximum": -5, "minimum": -1000},
            "big": {"type": "integer", "minimum": 1000000},
            "half": {"type": "integer", "minimum": 2.5, "exclusiveMaximum": 7.5},
            "pos": {"type": "number", "exclusiveMinimum": 0},
            "upto": {"type": "number", "exclusiveMaximum": 10, "minimum": 9},
            "step": {"type": "integer", "multipleOf": 5, "minimum": -52, "maximum": 50},
            "whole": {"type": "number", "multipleOf": 3},
            "frac": {"type": "number", "minimum": 0.5, "exclusiveMaximum": 2.75},
            "tiny": {"type": "number", "exclusiveMinimum": -0.001, "maximum": 0.001},
        },
        "required": ["age", "temp", "p", "neg", "big", "half", "pos", "upto", "step"],
    },
    "strings": {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3,5}$"},
            "slug": {"type": "string", "pattern": "^[a-z0-9]+(?:-[a-z0-9]+)*$", "maxLength": 12},
            "when": {"type": "string", "format": "date-time"},
            "id": {"type": "string", "format": "uuid"},
            "ip": {"type": "string", "format": "ipv4"},
            "day": {"type": "string", "format": "date"},
            "note": {"type": "string", "pattern": "ok", "minLength": 3},
        },
        "required": ["code", "slug", "when", "id"],
    },
    "tuple": {
        "type": "array",
        "prefixItems": [{"type": "string", "pattern": "^[a-z]+$"},
                        {"type": "integer", "minimum": 1}],
        "items": False,
        "minItems": 1,
    },
    "tuple_rest": {"type": "array", "prefixItems": [{"const": "head"}],
                   "items": {"type": "boolean"}, "maxItems": 4},
    "union": {
        "$defs": {
            "Cat": {"type": "object", "properties": {
                "pet": {"const": "cat"}, "lives": {"type": "integer", "minimum": 1, "maximum": 9}},
                "required": ["pet", "lives"]},
            "Dog": {"type": "object", "properties": {
                "pet": {"const": "dog"}, "good": {"type": "boolean"}}, "required": ["pet"]},
        },
        "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
    },
    "kinds_union": {"oneOf": [{"type": "string", "maxLength": 3}, {"type": "integer"},
                              {"type": "null"}]},
    "named_map": {"type": "object", "propertyNames": {"pattern": "^[a-z]{1,3}$"},
                  "additionalProperties": {"type": "integer", "minimum": 0}},
    "unique": {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c", 1, 1.0, None, True]},
                     "uniqueItems": True, "minItems": 1, "maxItems": 3},
            "flags": {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True},
            "any": {"type": "array", "items": {"$ref": "#/$defs/Color"}, "uniqueItems": True},
        },
        "required": ["tags", "flags", "any"],
        "$defs": {"Color": {"enum": ["red", "green", "blue"]}},
    },
}

# Instances of the patterns above (each promised to be generated: see string_pattern.h).
PATTERN_SAMPLES = {
    "^[A-Z]{2}-\\d{3,5}$": lambda rng: "".join(rng.choice("ABQZ") for _ in range(2)) + "-" +
    "".join(rng.choice("0123456789") for _ in range(rng.randint(3, 5))),
    "^[a-z0-9]+(?:-[a-z0-9]+)*$": lambda rng: "-".join(
        "".join(rng.choice("az09") for _ in range(rng.randint(1, 3)))
        for _ in range(rng.randint(1, 3))),
    "^[a-z]+$": lambda rng: "".join(rng.choice("abz") for _ in range(rng.randint(1, 6))),
    "^[a-z]{1,3}$": lambda rng: "".join(rng.choice("abz") for _ in range(rng.randint(1, 3))),
    "ok": lambda rng: rand_string(rng, 0, 3) + "ok" + rand_string(rng, 1, 3),
}


def number_in(rng, s, integer):
    lo = s.get("minimum", s.get("exclusiveMinimum"))
    hi = s.get("maximum", s.get("exclusiveMaximum"))
    a = lo if lo is not None else -1000
    b = hi if hi is not None else a + 2000
    while True:
        if "multipleOf" in s:
            v = s["multipleOf"] * rng.randint(int(a) // s["multipleOf"] - 1,
                                              int(b) // s["multipleOf"] + 1)
        elif integer:
            v = rng.randint(int(a) - 1, int(b) + 1)
        else:
            v = rng.choice([round(rng.uniform(a, b), rng.randint(0, 4)), float(int(a)), a, b])
        ok = True
        if "minimum" in s:
            ok = ok and v >= s["minimum"]
        if "exclusiveMinimum" in s:
            ok = ok and v > s["exclusiveMinimum"]
        if "maximum" in s:
            ok = ok and v <= s["maximum"]
        if "exclusiveMaximum" in s:
            ok = ok and v < s["exclusiveMaximum"]
        if ok:
            return v

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
    if "anyOf" in s or "oneOf" in s:
        return instance(root, rng.choice(s.get("anyOf", s.get("oneOf"))), rng, depth + 1)
    if "const" in s:
        return s["const"]
    if "enum" in s:
        return rng.choice(s["enum"])
    t = s.get("type")
    if isinstance(t, list):
        t = rng.choice(t)
    if t is None:
        t = "object" if ("properties" in s or "additionalProperties" in s) else "array"
    if t == "string" and "pattern" in s:
        return PATTERN_SAMPLES[s["pattern"]](rng)
    if t == "string" and "format" in s:
        return rand_format(rng, s["format"])
    if t in ("integer", "number") and any(k in s for k in ("minimum", "maximum", "multipleOf",
                                                             "exclusiveMinimum",
                                                             "exclusiveMaximum")):
        return number_in(rng, s, t == "integer")
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
        if s.get("uniqueItems"):
            # Distinct values in the order listed (the form the grammar promises).
            item = s["items"]
            item = resolve(root, item["$ref"]) if "$ref" in item else item
            values = item["enum"] if "enum" in item else [False, True]
            distinct = []
            for v in values:
                if not any(v == d and type(v) is type(d) or (v == d and isinstance(v, (int, float))
                           and isinstance(d, (int, float)) and not isinstance(v, bool)
                           and not isinstance(d, bool)) for d in distinct):
                    distinct.append(v)
            n = len(distinct)
            hi = min(s.get("maxItems", n), n)
            k = rng.randint(lo, hi)
            idx = sorted(rng.sample(range(n), k))
            return [distinct[i] for i in idx]
        prefix = s.get("prefixItems", [])
        if s.get("items") is False:
            hi = min(hi, len(prefix)) if "maxItems" in s else len(prefix)
        n = rng.randint(lo, hi)
        return [instance(root, prefix[i] if i < len(prefix) else s.get("items", {}), rng,
                         depth + 1) for i in range(n)]
    props = s.get("properties", {})
    req = set(s.get("required", []))
    if not props:
        def key():
            if "propertyNames" in s:
                return PATTERN_SAMPLES[s["propertyNames"]["pattern"]](rng)
            return rand_string(rng, 1, 4)
        return {key(): instance(root, s.get("additionalProperties", {}), rng, depth + 1)
                for _ in range(rng.randint(0, 3))}
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
        jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator,
                            format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
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
