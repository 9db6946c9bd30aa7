"""End-to-end text generation: `sampan run`, `sampan chat` and `sampan render-chat` on the demo
model (a real Llama 2 SentencePiece tokenizer, weights fitted to bigram statistics by
scripts/make_demo_model.py), checked against the independent numpy forward pass
(tests/reference/numpy_llama.py), HF `tokenizers` and Python `jinja2`.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as U  # noqa: E402

LOGPROB_LINE = re.compile(r"^\[logprob\] (\d+) .*? (-?[0-9.]+|-inf)(?: \|.*)?$")


def demo_model(args):
    out = os.path.join(args.work_dir, "demo")
    if not os.path.exists(os.path.join(out, "config.json")):
        subprocess.run([sys.executable, os.path.join(args.source_dir, "scripts", "make_demo_model.py"),
                        "--tokenizer-dir", os.path.join(args.source_dir, "tests", "data", "tokenizers", "llama-spm"),
                        "--out", out], check=True)
    return out


def parse_logprobs(stderr):
    toks = []
    for line in stderr.splitlines():
        m = LOGPROB_LINE.match(line)
        if m:
            toks.append((int(m.group(1)), float(m.group(2))))
    return toks


def main():
    args = U.parse_args(__doc__)
    res = U.Results()
    U.require_binary(args, res)
    import numpy_llama as ref
    from tokenizers import Tokenizer

    model = demo_model(args)
    tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    prompt = "The function returns a list of"

    # 1. Greedy: every token is numpy's argmax (or within a near-tie of it), logprobs agree.
    r = U.run_sampan(args, ["run", "--model", model, "--prompt", prompt, "--temperature", "0",
                            "--max-tokens", "16", "--ignore-eos", "--logprobs", "3"])
    res.check("run greedy exits 0", r.returncode == 0, r.describe() if r.returncode != 0 else "")
    steps = parse_logprobs(r.stderr)
    res.check("run greedy: 16 tokens with logprobs", len(steps) == 16, f"got {len(steps)}")
    ids = tok.encode(prompt).ids  # BOS added as the tokenizer's post-processor says
    worst_gap, worst_lp = 0.0, 0.0
    for t, lp in steps:
        logits = ref.logits(model, ids)[-1].astype(np.float64)
        worst_gap = max(worst_gap, logits.max() - logits[t])
        log_sm = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
        worst_lp = max(worst_lp, abs(log_sm[t] - lp))
        ids.append(t)
    # bf16 weights and f32 arithmetic vs float64 numpy: logits differ by ~1e-3; a chosen token
    # may only lose to numpy's argmax by such a near-tie.
    res.check("greedy tokens are numpy's argmax (within 0.02 logit)", worst_gap <= 0.02, f"max gap {worst_gap:.4g}")
    res.check("logprobs match numpy log_softmax (within 0.02)", worst_lp <= 0.02, f"max diff {worst_lp:.4g}")
    text = tok.decode([t for t, _ in steps])
    res.check("streamed text equals the decode of the tokens", r.stdout.rstrip("\n") == text,
              f"{r.stdout!r} vs {text!r}")

    # 2. Seeded sampling is reproducible; another seed differs.
    base = ["run", "--model", model, "--prompt", prompt, "--temperature", "1.0", "--top-p", "0.95",
            "--max-tokens", "24", "--ignore-eos"]
    a = U.run_sampan(args, base + ["--seed", "7"])
    b = U.run_sampan(args, base + ["--seed", "7"])
    c = U.run_sampan(args, base + ["--seed", "8"])
    res.check("same seed, same output", a.returncode == 0 and a.stdout == b.stdout, a.describe())
    res.check("other seed, other output", c.returncode == 0 and c.stdout != a.stdout)

    # 3. A stop string cuts the output before it (also when it spans tokens).
    full = r.stdout.rstrip("\n")
    if len(full) > 12:
        stop = full[6:10]
        s = U.run_sampan(args, ["run", "--model", model, "--prompt", prompt, "--temperature", "0",
                                "--max-tokens", "16", "--ignore-eos", "--stop", stop])
        want = full[: full.find(stop)]
        res.check("stop string ends generation before it", s.returncode == 0 and s.stdout.rstrip("\n") == want,
                  f"{s.stdout!r} vs {want!r}")

    # 4. render-chat with --model equals jinja2 on the model's template.
    import jinja2
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    mpath = os.path.join(args.work_dir, "messages.json")
    json.dump(msgs, open(mpath, "w"))
    cfg = json.load(open(os.path.join(model, "tokenizer_config.json")))
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    want = env.from_string(cfg["chat_template"]).render(messages=msgs, add_generation_prompt=True,
                                                        bos_token="<s>", eos_token="</s>")
    rc = U.run_sampan(args, ["render-chat", "--model", model, "--messages", mpath, "--add-generation-prompt"])
    res.check("render-chat --model matches jinja2", rc.returncode == 0 and rc.stdout == want, f"{rc.stdout!r} vs {want!r}")

    # 5. chat: two turns from stdin, each answered; the second reuses the first turn's cache.
    p = subprocess.run([args.sampan, "chat", "--model", model, "--temperature", "0", "--max-tokens", "8",
                        "--stats"], input="Hello\nWhat is a list?\n", capture_output=True, text=True,
                       timeout=U.RUN_TIMEOUT_S)
    answers = [l for l in p.stdout.split("\n") if l.strip()]
    res.check("chat answers two turns", p.returncode == 0 and len(answers) >= 1, p.stderr[-300:])
    cached = re.findall(r"\((\d+) cached\)", p.stderr)
    res.check("second chat turn reuses the cached prefix", len(cached) == 2 and int(cached[1]) > 0, str(cached))

    # 6. Bad input: one error line, non-zero exit.
    for name, argv in [("top-p out of range", ["run", "--model", model, "--prompt", "x", "--top-p", "2"]),
                       ("negative temperature", ["run", "--model", model, "--prompt", "x", "--temperature", "-1"]),
                       ("model without tokenizer", ["run", "--model", os.path.join(args.source_dir, "tests", "data", "models", "tiny_llama3"), "--prompt", "x"])]:
        e = U.run_sampan(args, argv)
        res.check(f"bad input: {name}", e.returncode not in (0, None) and e.returncode > 0 and
                  e.last_stderr_line().startswith("error: "), e.describe())
    res.finish()


if __name__ == "__main__":
    main()
