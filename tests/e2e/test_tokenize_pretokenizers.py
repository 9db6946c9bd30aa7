"""Byte-level BPE with the Llama 3 and Qwen2 pre-tokenizers: `sampan tokenize` against HF
`tokenizers` on the shared corpus. No Llama 3 / Qwen2 vocabulary ships with the fixtures, so the
GPT-2 vocabulary and merges are paired with each family's published pre_tokenizer (and Qwen2's
NFC normalizer): what is tested is the regex split (case-insensitive contractions, \\p{L}/\\p{N}
classes, 1-3 digit groups vs single digits, the lookahead whitespace rule) and the byte-level
pipeline around it, which is where the families differ.
"""
import copy
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as U  # noqa: E402

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def variant(base, regex, trim_offsets, normalizer):
    t = copy.deepcopy(base)
    t["normalizer"] = normalizer
    t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": trim_offsets, "use_regex": False}]}
    return t


def main():
    args = U.parse_args(__doc__)
    res = U.Results()
    U.require_binary(args, res)
    from tokenizers import Tokenizer

    base = json.load(open(os.path.join(args.source_dir, "tests", "data", "tokenizers", "gpt-2", "tokenizer.json")))
    corpus = json.load(open(os.path.join(args.source_dir, "tests", "data", "tokenizer_corpus", "corpus.json")))
    corpus += ["I'LL DO IT, you'Re right: 12345678 and 1,000,000.5", "x\u00a0\u00a0y  \n\n  z\t\t\n",
               "e\u0301te\u0301 caf\u00e9", "don't   stop\r\n\r\nnow"]
    variants = {"llama3": variant(base, LLAMA3_REGEX, True, None),
                "qwen2": variant(base, QWEN2_REGEX, False, {"type": "NFC"})}
    for name, tj in variants.items():
        path = os.path.join(args.work_dir, f"{name}.json")
        json.dump(tj, open(path, "w"), ensure_ascii=False)
        hf = Tokenizer.from_file(path)
        texts = [t for t in corpus if t]
        argv = [args.sampan, "tokenize", "--tokenizer", path]
        for text in texts:  # one process, one line of ids per text
            argv += ["--text", text]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=U.RUN_TIMEOUT_S)
        lines = p.stdout.split("\n") if p.returncode == 0 else []
        res.check(f"{name}: one line per text", len(lines) == len(texts) + 1,
                  f"{len(lines)} lines for {len(texts)} texts; {p.stderr.strip()[-200:]}")
        for i, text in enumerate(texts):
            want = hf.encode(text, add_special_tokens=False).ids
            got = [int(x) for x in lines[i].split()] if len(lines) == len(texts) + 1 else None
            res.check(f"{name} text {i}", got == want,
                      "" if got == want else f"text {text[:40]!r}: sampan {got} vs HF {want}")
    res.finish()


if __name__ == "__main__":
    main()
