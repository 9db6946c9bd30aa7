#!/usr/bin/env python3
"""Finetunes the demo model (scripts/make_demo_model.py) with a LoRA adapter on real text found
offline — the Python documentation's topic pages (pydoc_data.topics) — and measures the
held-out perplexity with `sampan eval` before and after (README "Finetuning").

    python3 scripts/finetune_demo.py [--sampan build/sampan] [--model build/demo-model]
        [--work /tmp/sampan-finetune-demo] [--steps 300] [--threads 2]

Whole topics are held out (every 8th), so evaluation text never shares a paragraph with
training text. `sampan eval --lora` scores the same held-out text with the base (its reference)
and with the adapter, in one run.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def run(argv, **kw):
    print("$ " + " ".join(argv), flush=True)
    return subprocess.run(argv, check=True, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sampan", default=os.path.join(REPO, "build", "sampan"))
    ap.add_argument("--model", default=os.path.join(REPO, "build", "demo-model"))
    ap.add_argument("--work", default="/tmp/sampan-finetune-demo")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    if not os.path.exists(os.path.join(a.model, "config.json")):
        run([sys.executable, os.path.join(HERE, "make_demo_model.py"), "--tokenizer-dir",
             os.path.join(REPO, "tests", "data", "tokenizers", "llama-spm"), "--out", a.model])

    import pydoc_data.topics as topics
    train, held = [], []
    for i, name in enumerate(sorted(topics.topics)):
        paras = [" ".join(p.split()) for p in topics.topics[name].split("\n\n")]
        paras = [p for p in paras if len(p) >= 80]
        (held if i % 8 == 3 else train).extend(paras)
    data = os.path.join(a.work, "train.jsonl")
    with open(data, "w") as f:
        for p in train:
            f.write(json.dumps({"text": p}) + "\n")
    held_jsonl = os.path.join(a.work, "heldout.jsonl")
    with open(held_jsonl, "w") as f:
        for p in held:
            f.write(json.dumps({"text": p}) + "\n")
    held_txt = os.path.join(a.work, "heldout.txt")
    with open(held_txt, "w") as f:
        f.write("\n\n".join(held))
    print(f"{len(train)} training paragraphs, {len(held)} held out "
          f"({sum(map(len, held))} characters)", flush=True)

    adapter = os.path.join(a.work, "adapter")
    run([a.sampan, "finetune", "--model", a.model, "--data", data, "--eval-data", held_jsonl,
         "--out", adapter, "--targets", "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
         "--rank", "16", "--alpha", "32", "--lr", "2e-3", "--steps", str(a.steps),
         "--batch-size", "8", "--seq-len", "128", "--warmup", "20", "--eval-every", "100",
         "--threads", str(a.threads), "--seed", "0"])
    out = os.path.join(a.work, "eval.json")
    run([a.sampan, "eval", "--model", a.model, "--lora", adapter, "--text", held_txt,
         "--ctx", "256", "--threads", str(a.threads), "--json", out])
    r = json.load(open(out))
    print(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
