"""`sampan tokenize` against HF `tokenizers` on every committed tokenizer.json and the corpus in
tests/data/tokenizer_corpus: ids without and with --add-special, and --decode of those ids."""

import json
import os
import subprocess
import sys

from e2e_util import RUN_TIMEOUT_S, parse_args

NAMES = ["gpt-2", "llama-spm", "phi-3", "bert-bge", "deepseek-llm", "falcon"]


def run(args, *extra):
    p = subprocess.run([args.sampan, "tokenize", *extra], capture_output=True, timeout=RUN_TIMEOUT_S)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def main():
    args = parse_args(__doc__)
    try:
        from tokenizers import Tokenizer
    except ImportError:
        # No test passes by skipping: the reference is required (scripts/setup.sh installs it).
        print("FAIL: python package `tokenizers` is not installed")
        print("0 passed, 1 failed")
        return 1
    with open(os.path.join(args.source_dir, "tests", "data", "tokenizer_corpus", "corpus.json"),
              encoding="utf-8") as f:
        corpus = json.load(f)
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
            print(f"FAIL {what}")

    for name in NAMES:
        path = os.path.join(args.source_dir, "tests", "data", "tokenizers", name, "tokenizer.json")
        ref = Tokenizer.from_file(path)
        # Every text in one process (--text repeated: one line of ids per text, in order).
        texts = []
        for text in corpus:
            texts += ["--text", text]
        rc, out, err = run(args, "--tokenizer", path, *texts)
        lines = out.decode().split("\n") if rc == 0 and out.endswith(b"\n") else None
        check(lines is not None and len(lines) == len(corpus) + 1,
              f"{name} encode of {len(corpus)} texts: rc={rc} {err.strip()} lines={None if lines is None else len(lines)}")
        for i, text in enumerate(corpus):
            want = ref.encode(text, add_special_tokens=False).ids
            got = [int(v) for v in lines[i].split()] if lines and len(lines) == len(corpus) + 1 else None
            check(got == want, f"{name} encode #{i} {text[:40]!r}: got={got} want={want}")
            if i == 0:  # one text alone, the single form
                rc, out, err = run(args, "--tokenizer", path, "--text", text)
                got = [int(v) for v in out.decode().split()] if rc == 0 else None
                check(rc == 0 and out.decode().endswith("\n") and got == want,
                      f"{name} encode #{i} alone {text[:40]!r}: rc={rc} {err.strip()} got={got} want={want}")
            if i % 6 == 0:
                want_s = ref.encode(text, add_special_tokens=True).ids
                rc, out, err = run(args, "--model", os.path.dirname(path), "--text", text, "--add-special")
                got_s = [int(v) for v in out.decode().split()] if rc == 0 else None
                check(rc == 0 and got_s == want_s,
                      f"{name} --add-special #{i} {text[:40]!r}: got={got_s} want={want_s} {err.strip()}")
            if i % 3 == 0 and want:
                ref_text = ref.decode(want, skip_special_tokens=False)
                rc, out, err = run(args, "--tokenizer", path, "--decode", ",".join(map(str, want)))
                # HF replaces invalid UTF-8 with U+FFFD; sampan keeps the bytes (and decodes added
                # tokens as their text), so compare lossily and accept an exact round trip.
                got_text = out[:-1].decode("utf-8", "replace") if rc == 0 and out.endswith(b"\n") else None
                check(got_text == ref_text or (got_text == text and "\ufffd" in ref_text),
                      f"{name} decode #{i} {text[:40]!r}: got={got_text!r} want={ref_text!r} {err.strip()}")
    # errors: one line, non-zero exit
    bad = os.path.join(args.work_dir, "bad_tokenizer.json")
    with open(bad, "w") as f:
        f.write("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}")
    rc, out, err = run(args, "--tokenizer", bad, "--text", "x")
    check(rc != 0 and out == b"" and err.count("\n") == 1 and err.startswith("error: ") and "Unigram" in err
          and "bad_tokenizer.json" in err, f"unsupported model type: rc={rc} err={err!r}")
    rc, out, err = run(args, "--tokenizer", os.path.join(args.work_dir, "missing.json"), "--text", "x")
    check(rc != 0 and err.startswith("error: ") and "missing.json" in err, f"missing file: rc={rc} err={err!r}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
