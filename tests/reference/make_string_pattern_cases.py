"""Makes the JSON Schema `pattern` / `format` cases, labelled by Python and by ECMAScript (run
once, commit the output).

    pip install jsonschema fqdn rfc3339-validator   # jsonschema's format checkers
    python3 tests/reference/make_string_pattern_cases.py   # needs node (ECMAScript's RegExp)

Writes tests/data/json_schema/patterns.json:
  {"patterns": [{"pattern", "exact", "cases": [[text, python, ecma], ...]}, ...],
   "formats": [{"format", "cases": [[text, valid, canonical], ...]}, ...]}
`python` is re.search(pattern, text) (what Python's jsonschema runs), `ecma` is
new RegExp(pattern, "u").test(text) in node (ECMA-262, the dialect JSON Schema names; without
"u" where only that compiles); null where that dialect refuses the pattern ((?P<name>) is
Python's, (?<name>) ECMAScript's). Texts
are every string up to 4 characters over the pattern's alphabet plus longer random ones. For an
`exact` pattern the alphabet avoids where the dialects and Sampan's intersection differ, so the
grammar must accept exactly the texts both accept; for the others only soundness is checked
(accept -> both accept). `valid` is Draft 2020-12's FormatChecker verdict; `canonical` marks
texts built in the subset string_pattern.h promises. test_json_schema reads both.
"""

import itertools
import json
import os
import random
import re
import subprocess
import tempfile
import uuid

import jsonschema

# (pattern, alphabet, exact)
PATTERNS = [
    ("^abc$", "abc", True),
    ("abc", "abc", True),
    ("^a|b$", "abc", True),
    ("a$|^b", "abc", True),
    ("^(ab|cd)*$", "abcd", True),
    ("^a{2,3}$", "ab", True),
    ("^a{2,}b?$", "ab", True),
    ("^(a?){3}$", "ab", True),
    ("^[a-c]+$", "abcd", True),
    ("^[^a-c]*$", "abd\u4e2d", True),
    ("x", "xy", True),
    ("^$", "a", True),
    ("^\\d{2}-\\d+$", "1-a", True),
    ("\\w+!", "a_!-", True),
    ("^\\s*$", " \t\u000ba", True),
    ("^\\S+$", "a \t", True),
    ("^[\\d.]+$", "1.a", True),
    ("^[^\\d]+$", "1a.", True),
    ("^(?:a|)b$", "ab", True),
    ("^a*?b+?$", "ab", True),
    ("(?P<x>ab)c", "abc", True),
    ("^(?<x>ab)c$", "abc", True),
    ("^[-a]$", "a-b", True),
    ("^[a-]$", "a-b", True),
    ("^\\.\\*$", ".*a", True),
    ("^\\x41\\u0042$", "ABa", True),
    ("^(a|b|)+$", "abc", True),
    ("^((a)*)*$", "ab", True),
    ('^[\\\\"]+$', '\\"a', True),
    ("^\\t\\n?$", "\t\na", False),
    ("^.{3}$", "a\u00e9\u4e2d\U0001F600", True),
    ("^[\u00e9-\u00fc]+$", "a\u00e9\u00f6\u00fc", True),
    ("^[^a]$", "a\u4e2d\U0001F600\u0001", True),
    ("^\u4e2d+\U0001F600?$", "\u4e2d\U0001F600a", True),
    ("^[\\u0000-\\u001f]$", "\u0000\u0008\u001fa", True),
    ("^[a-z]{1,3}(?:-[a-z]{1,3})*$", "a-", True),
    ("a^b", "ab", True),
    ("^a$b", "ab", True),
    ("^(?:[01][0-9]|2[0-3]):[0-5][0-9]$", "02:", True),
    ("^[A-Z][a-z]*(?: [A-Z][a-z]*)*$", "Aa ", True),
    # Where the dialects differ: soundness only.
    ("^\\d+$", "1\u0663", False),
    ("^\\w+$", "a\u00e9", False),
    ("^\\s$", " \u001c\u00a0\ufeff", False),
    ("^a$", "a\n", False),
    ("^.$", "a\r\n\u2028", False),
    ("^[^\\s]+$", "a \u00a0", False),
    ("^\\D\\W\\S$", "a1 \u00e9!", False),
]

FORMATS = ["date", "time", "date-time", "email", "hostname", "ipv4", "ipv6", "uuid"]


def ecma_labels(pattern, texts):
    script = (
        "const fs = require('fs');"
        "const [p, texts] = JSON.parse(fs.readFileSync(process.argv[1], 'utf8'));"
        "let re = null; try { re = new RegExp(p, 'u'); } catch (e) {"
        " try { re = new RegExp(p); } catch (e2) {} }"
        "process.stdout.write(JSON.stringify(texts.map(t => re ? re.test(t) : null)));"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8") as f:
        json.dump([pattern, texts], f)
        f.flush()
        r = subprocess.run(["node", "-e", script, f.name], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"node on {pattern!r}: {r.stderr[-400:]}")
    return json.loads(r.stdout)


def pattern_texts(rng, alphabet):
    """Every string up to 4 characters over `alphabet` (1,200 of them at most) and 60 random
    longer ones, without repeats."""
    texts = [""]
    for n in range(1, 5):
        texts += ["".join(t) for t in itertools.product(alphabet, repeat=n)]
    if len(texts) > 1200:
        texts = texts[:1] + rng.sample(texts[1:], 1199)
    for _ in range(60):
        texts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(5, 12))))
    return list(dict.fromkeys(texts))


def pattern_cases(rng, pattern, alphabet):
    texts = pattern_texts(rng, alphabet)
    ecma = ecma_labels(pattern, texts)
    try:
        py = re.compile(pattern)
    except re.error:  # a form only ECMAScript has, as (?<name>...)
        py = None
    assert py is not None or ecma[0] is not None, pattern
    return [[t, None if py is None else py.search(t) is not None, e] for t, e in zip(texts, ecma)]


def rand_date(rng):
    month = rng.randint(1, 12)
    days = {2: 28, 4: 30, 6: 30, 9: 30, 11: 30}.get(month, 31)
    return f"{rng.randint(1000, 9999)}-{month:02d}-{rng.randint(1, days):02d}"


def rand_time(rng):
    t = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    if rng.random() < 0.5:
        t += "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 9)))
    if rng.random() < 0.5:
        return t + "Z"
    return t + f"{rng.choice('+-')}{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"


def rand_label(rng, first="abcXYZ019", mid="abz09-"):
    n = rng.randint(1, 12)
    s = rng.choice(first)
    if n > 1:
        s += "".join(rng.choice(mid) for _ in range(n - 2)) + rng.choice("abc09")
    return s


def rand_format(rng, fmt):
    if fmt == "date":
        return rand_date(rng)
    if fmt == "time":
        return rand_time(rng)
    if fmt == "date-time":
        return rand_date(rng) + "T" + rand_time(rng)
    if fmt == "email":
        local = "".join(rng.choice("abcXYZ09._%+-") for _ in range(rng.randint(1, 10)))
        domain = ".".join(rand_label(rng) for _ in range(rng.randint(1, 3)))
        return local + "@" + domain + "." + "".join(rng.choice("comorgde")
                                                     for _ in range(rng.randint(2, 5)))
    if fmt == "hostname":
        labels = [rand_label(rng) for _ in range(rng.randint(0, 2))]
        return ".".join(labels + [rand_label(rng, first="abcXYZ")])
    if fmt == "ipv4":
        return ".".join(str(rng.choice([0, 9, 10, 99, 100, 199, 200, 249, 250, 255,
                                        rng.randint(0, 255)])) for _ in range(4))
    if fmt == "ipv6":
        return ":".join(format(rng.randint(0, 0xFFFF), "x") for _ in range(8))
    return str(uuid.UUID(int=rng.getrandbits(128)))


MUTATE = "0123456789:-.T Z+@a/_\u00e9"


def format_cases(rng, fmt):
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    cases = {}
    extra = {
        "date": ["2024-02-29", "2023-02-29", "0000-01-01", "2024-13-01", "2024-04-31", "24-01-01"],
        "time": ["23:59:60Z", "24:00:00Z", "12:00:00", "12:00:00z", "12:00:00.Z"],
        "date-time": ["2024-01-01t00:00:00Z", "2024-01-01 00:00:00Z", "2024-01-01T00:00:00"],
        "email": ["a@b", "@b.com", "a@", "a b@c.de"],
        "hostname": ["-a.com", "a-.com", "a..b", "a" * 64, "1.2.3.4", "localhost"],
        "ipv4": ["01.2.3.4", "256.1.1.1", "1.2.3", "1.2.3.4.5"],
        "ipv6": ["::1", "1::", "1:2:3:4:5:6:7:8:9", "12345::", "A:B:C:D:E:F:0:1"],
        "uuid": ["00000000-0000-0000-0000-00000000000G", "0000000000000000000000000000000a",
                 "ABCDEF01-2345-6789-ABCD-EF0123456789"],
    }[fmt]
    for _ in range(60):
        text = rand_format(rng, fmt)
        assert checker.conforms(text, fmt), (fmt, text)
        cases[text] = (True, True)
        for _ in range(6):
            b = list(text)
            op = rng.randrange(3)
            pos = rng.randrange(len(b) + (op == 1))
            if op == 0:
                b[pos] = rng.choice(MUTATE)
            elif op == 1:
                b.insert(pos, rng.choice(MUTATE))
            else:
                del b[pos]
            t = "".join(b)
            cases.setdefault(t, (checker.conforms(t, fmt), False))
    for t in extra:
        cases.setdefault(t, (checker.conforms(t, fmt), False))
    return [[t, v, c] for t, (v, c) in cases.items()]


def main():
    rng = random.Random(20261129)
    out = {"patterns": [], "formats": []}
    for pattern, alphabet, exact in PATTERNS:
        out["patterns"].append({"pattern": pattern, "exact": exact,
                                "cases": pattern_cases(rng, pattern, alphabet)})
    for fmt in FORMATS:
        out["formats"].append({"format": fmt, "cases": format_cases(rng, fmt)})
    path = os.path.join(os.path.dirname(__file__), "..", "data", "json_schema", "patterns.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    n = sum(len(p["cases"]) for p in out["patterns"])
    m = sum(len(p["cases"]) for p in out["formats"])
    print(f"{path}: {len(PATTERNS)} patterns, {n} texts; {len(FORMATS)} formats, {m} texts")


if __name__ == "__main__":
    main()
