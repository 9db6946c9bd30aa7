"""Makes the guided_regex cases: the patterns of make_string_pattern_cases.py as raw text that
the whole pattern must match, labelled by Python and by ECMAScript (run once, commit the output).

    python3 tests/reference/make_raw_pattern_cases.py   # needs node (ECMAScript's RegExp)

Writes tests/data/json_schema/raw_patterns.json:
  {"patterns": [{"pattern", "exact", "cases": [[text, python, ecma], ...]}, ...]}
`python` is re.fullmatch(pattern, text) (what vLLM's guided_regex asks of the output), `ecma`
new RegExp("^(?:" + pattern + ")$", "u").test(text) in node (without "u" where only that
compiles); null where that dialect refuses the pattern. Texts as make_string_pattern_cases.py
makes them (every string up to 4 characters over the pattern's alphabet, plus random longer
ones). `exact` as there: the grammar must accept exactly the texts both accept; otherwise only
soundness is checked. test_guided_grammar reads it.
"""

import json
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_string_pattern_cases import PATTERNS, ecma_labels, pattern_texts  # noqa: E402


def cases(rng, pattern, alphabet):
    texts = pattern_texts(rng, alphabet)
    ecma = ecma_labels("^(?:" + pattern + ")$", texts)
    try:
        py = re.compile(pattern)
    except re.error:  # a form only ECMAScript has, as (?<name>...)
        py = None
    assert py is not None or ecma[0] is not None, pattern
    return [[t, None if py is None else py.fullmatch(t) is not None, e]
            for t, e in zip(texts, ecma)]


def main():
    rng = random.Random(20261201)
    out = {"patterns": [{"pattern": p, "exact": exact, "cases": cases(rng, p, alphabet)}
                        for p, alphabet, exact in PATTERNS]}
    path = os.path.join(os.path.dirname(__file__), "..", "data", "json_schema",
                        "raw_patterns.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
    n = sum(len(p["cases"]) for p in out["patterns"])
    print(f"{len(out['patterns'])} patterns, {n} texts -> {path}")


if __name__ == "__main__":
    main()
