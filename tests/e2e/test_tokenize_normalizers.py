"""`sampan tokenize` against HF `tokenizers` with the NFC, NFD, NFKC and NFKD normalizers (alone and
inside a Sequence): copies of the GPT-2 tokenizer.json with the normalizer replaced, encoded on
composed, decomposed and compatibility texts."""

import json
import os
import subprocess
import sys

from e2e_util import RUN_TIMEOUT_S, parse_args

TEXTS = [
    "caf\u00e9", "cafe\u0301", "\u00c5ngstr\u00f6m \u212b A\u030a",
    "\ud55c\uad6d\uc5b4", "\u1112\u1161\u11ab\u1100\u116e\u11a8\u110b\u1165",
    "\ufb01nal of\ufb01ce", "\u2460 \u2461 \u00bd x\u00b2", "\uff21\uff22\uff23 \uff11\uff12\uff13",
    "a\u0323\u0302 a\u0302\u0323 \u1ea1\u0302 q\u0307\u0323 d\u0307\u0323",
    "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u", "Tie\u0302\u0301ng Vie\u0323\u0302t co\u0301 da\u0302\u0301u",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u0915\u093c \u0958 \u0928\u093c \u0929",
    "\u0301leading mark", "\u1e9b\u0323 \u0344 \u0f73 \ufdfa \u3300", "plain ascii text",
]

FORMS = ["NFC", "NFD", "NFKC", "NFKD"]


def main():
    args = parse_args(__doc__)
    try:
        from tokenizers import Tokenizer
    except ImportError:
        # No test passes by skipping: the reference is required (scripts/setup.sh installs it).
        print("FAIL: python package `tokenizers` is not installed")
        print("0 passed, 1 failed")
        return 1
    with open(os.path.join(args.source_dir, "tests", "data", "tokenizers", "gpt-2", "tokenizer.json"),
              encoding="utf-8") as f:
        base = json.load(f)
    normalizers = {f: {"type": f} for f in FORMS}
    normalizers["Sequence-NFKD-NFC"] = {"type": "Sequence", "normalizers": [{"type": "NFKD"}, {"type": "NFC"}]}
    passed = failed = 0
    for name, norm in normalizers.items():
        path = os.path.join(args.work_dir, f"tokenizer_{name}.json")
        spec = dict(base, normalizer=norm)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spec, f, ensure_ascii=False)
        ref = Tokenizer.from_file(path)
        argv = [args.sampan, "tokenize", "--tokenizer", path]
        for text in TEXTS:  # one process, one line of ids per text
            argv += ["--text", text]
        p = subprocess.run(argv, capture_output=True, timeout=RUN_TIMEOUT_S)
        lines = p.stdout.decode().split("\n") if p.returncode == 0 else []
        if len(lines) != len(TEXTS) + 1:
            failed += 1
            print(f"FAIL {name}: {len(lines)} lines for {len(TEXTS)} texts: rc={p.returncode} {p.stderr.decode().strip()}")
            continue
        for text, line in zip(TEXTS, lines):
            want = ref.encode(text, add_special_tokens=False).ids
            got = [int(v) for v in line.split()]
            if got == want:
                passed += 1
            else:
                failed += 1
                print(f"FAIL {name} {text!r}: got={got} want={want}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
