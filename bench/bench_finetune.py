"""LoRA training throughput: `sampan finetune` against PyTorch + peft on the same model, data
shape, threads and LoRA settings, in one run; tokens/s of full steps (forward + backward + AdamW)
and peak resident memory of each process.

    python3 bench/bench_finetune.py [--sampan build/sampan] [--python /work/refenv/bin/python]
        [--shapes small tinyllama] [--threads 2] [--steps 20] [--seq-len 256] [--batch-size 1]
        [--rank 8] [--targets q_proj,k_proj,v_proj,o_proj] [--torch-dtypes float32 bfloat16]
        [--sampan-precisions f32 bf16]
        [--rounds 2] [--work /tmp/sampan-bench-finetune]

Shapes: "small" is a random LlamaForCausalLM of hidden 256, 4 layers, 8 heads / 4 KV heads,
FFN 768, vocab 32000 (the shape of tests/reference/train_small_llama.py); "tinyllama" is
bench/make_synthetic_model.py's TinyLlama-1.1B shape (2.2 GB, written once). Both are bf16
safetensors with the llama-spm tokenizer. Sampan trains on the bf16 base as stored (f32
compute); PyTorch loads it in each --torch-dtypes dtype (float32: the usual CPU recipe; bfloat16:
oneDNN bf16 GEMMs), and the ratio is taken against the faster of them.

Every example is cut to exactly --seq-len tokens, so both sides run the same [batch, seq] shape
every step. The first step is warm-up for both and excluded. Short runs are not
trustworthy where a step is short (5 steps on the small shape once read 1.62x where 3 rounds of
20 read 0.71x, PyTorch's steps being far slower in the short run): keep --steps at 20 or more. Each round runs Sampan then each
PyTorch dtype one after the other; the best round of each is reported. Needs torch, transformers
and peft in --python (not in CI: a benchmark, not a test).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
import safetensors_io  # noqa: E402

SMALL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000,
         "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4,
         "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 2048,
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
         "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 1,
         "eos_token_id": 2}

TORCH_SNIPPET = r"""
import json, resource, sys, time
import torch
from transformers import AutoModelForCausalLM
from peft import LoraConfig, get_peft_model
(model_dir, dtype, threads, steps, seq, batch, rank, alpha, targets, ids_file) = sys.argv[1:]
threads, steps, seq, batch, rank = int(threads), int(steps), int(seq), int(batch), int(rank)
torch.set_num_threads(threads)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=float(alpha), lora_dropout=0.05,
                                         target_modules=targets.split(","), task_type="CAUSAL_LM"))
model.train()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
all_ids = json.load(open(ids_file))
times = []
for step in range(steps):
    rows = [all_ids[(step * batch + i) % len(all_ids)] for i in range(batch)]
    ids = torch.tensor(rows, dtype=torch.long)
    t0 = time.perf_counter()
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    times.append(time.perf_counter() - t0)
tok = batch * seq
print(json.dumps({"tokens_per_s": tok * (len(times) - 1) / sum(times[1:]),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def make_small(path):
    if os.path.exists(os.path.join(path, "model.safetensors")):
        return
    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(0)
    c = SMALL
    h, f, hd = c["hidden_size"], c["intermediate_size"], c["hidden_size"] // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * hd
    t = {"model.embed_tokens.weight": rng.normal(0, 0.02, (c["vocab_size"], h)),
         "model.norm.weight": np.ones(h), "lm_head.weight": rng.normal(0, 0.02, (c["vocab_size"], h))}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = np.ones(h)
        t[p + "post_attention_layernorm.weight"] = np.ones(h)
        for name, shape in (("self_attn.q_proj", (h, h)), ("self_attn.k_proj", (kv, h)),
                            ("self_attn.v_proj", (kv, h)), ("self_attn.o_proj", (h, h)),
                            ("mlp.gate_proj", (f, h)), ("mlp.up_proj", (f, h)),
                            ("mlp.down_proj", (h, f))):
            t[p + name + ".weight"] = rng.normal(0, 0.02, shape)
    safetensors_io.save_file({k: v.astype(np.float32) for k, v in t.items()},
                             os.path.join(path, "model.safetensors"),
                             dtypes={k: "BF16" for k in t})
    json.dump(c, open(os.path.join(path, "config.json"), "w"), indent=1)


def make_tinyllama(path):
    if not os.path.exists(os.path.join(path, "model.safetensors")):
        subprocess.run([sys.executable, os.path.join(HERE, "make_synthetic_model.py"), path],
                       check=True)


def add_tokenizer(path):
    src = os.path.join(REPO, "tests", "data", "tokenizers", "llama-spm")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, name), os.path.join(path, name))


def write_data(work, sampan, model, seq_len, n):
    """n examples of at least seq_len tokens (Python documentation topics), and their first
    seq_len ids as Sampan's data pipeline makes them (BOS + text ids), for PyTorch."""
    import pydoc_data.topics as topics
    texts = []
    for name in sorted(topics.topics):
        words = topics.topics[name].split()
        for i in range(0, len(words) - seq_len * 2, seq_len * 2):
            texts.append(" ".join(words[i:i + seq_len * 2]))
    texts = texts[:n]
    data = os.path.join(work, f"data-{seq_len}.jsonl")
    with open(data, "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    argv = [sampan, "tokenize", "--model", model, "--add-special"] + sum((["--text", t] for t in texts), [])
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    ids = [[int(x) for x in line.split()][:seq_len] for line in out.strip("\n").split("\n")]
    assert all(len(r) == seq_len for r in ids), "an example is shorter than --seq-len"
    ids_file = os.path.join(work, f"ids-{seq_len}.json")
    json.dump(ids, open(ids_file, "w"))
    return data, ids_file


def peak_rss_of(argv):
    """Runs argv and returns (stdout, peak RSS in MB) from the kernel's accounting of the child."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = p.stdout.read()
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{os.path.basename(argv[0])} {argv[1]} failed ({code}): {err[-800:]}")
    return out, usage.ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sampan", default=os.path.join(REPO, "build", "sampan"))
    ap.add_argument("--python", default="/work/refenv/bin/python")
    ap.add_argument("--shapes", nargs="+", default=["small", "tinyllama"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj")
    ap.add_argument("--torch-dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--sampan-precisions", nargs="+", choices=["f32", "bf16"], default=["f32"],
                    help="sampan finetune --precision values to time (bf16: GEMM operands rounded "
                         "to bf16, f32 master weights, AMX tiles where the CPU has them)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--work", default="/tmp/sampan-bench-finetune")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    rows = []
    for shape in a.shapes:
        model = os.path.join(a.work, "small") if shape == "small" else "/tmp/sampan-bench"
        (make_small if shape == "small" else make_tinyllama)(model)
        add_tokenizer(model)
        data, ids_file = write_data(a.work, a.sampan, model, a.seq_len,
                                    max(8, a.steps * a.batch_size))
        best = {}
        for _ in range(a.rounds):
            for prec in a.sampan_precisions:
                out_dir = os.path.join(a.work, f"adapter-{shape}")
                shutil.rmtree(out_dir, ignore_errors=True)
                argv = [a.sampan, "finetune", "--model", model, "--data", data, "--out", out_dir,
                        "--steps", str(a.steps), "--batch-size", str(a.batch_size),
                        "--seq-len", str(a.seq_len), "--threads", str(a.threads), "--rank", str(a.rank),
                        "--alpha", str(2 * a.rank), "--targets", a.targets, "--log-format", "json",
                        "--dropout", "0.05", "--precision", prec]
                out, rss = peak_rss_of(argv)
                steps = [json.loads(l) for l in out.splitlines() if json.loads(l).get("event") == "step"]
                tps = (steps[-1]["tokens"] - steps[0]["tokens"]) / (steps[-1]["elapsed_s"] - steps[0]["elapsed_s"])
                key = f"sampan {prec}"
                if tps > best.get(key, (0, 0))[0]:
                    best[key] = (tps, rss)
            for dt in a.torch_dtypes:
                argv = [a.python, "-c", TORCH_SNIPPET, model, dt, str(a.threads), str(a.steps),
                        str(a.seq_len), str(a.batch_size), str(a.rank), str(2 * a.rank), a.targets,
                        ids_file]
                out, rss = peak_rss_of(argv)
                r = json.loads(out.strip().splitlines()[-1])
                key = f"torch {dt}"
                if r["tokens_per_s"] > best.get(key, (0, 0))[0]:
                    best[key] = (r["tokens_per_s"], rss)
        fastest_torch = max(v[0] for k, v in best.items() if k.startswith("torch"))
        for k, (tps, rss) in best.items():
            rows.append((shape, k, tps, rss, tps / fastest_torch if k.startswith("sampan") else None))
    print(f"\nLoRA r={a.rank} on {a.targets}, seq {a.seq_len} x batch {a.batch_size}, "
          f"{a.threads} threads, {a.steps} steps (first excluded), best of {a.rounds} rounds\n")
    print("| model | engine | train tokens/s | peak RSS MB | Sampan / fastest PyTorch |")
    print("|---|---|---|---|---|")
    for shape, k, tps, rss, ratio in rows:
        print(f"| {shape} | {k} | {tps:.1f} | {rss:.0f} | {'' if ratio is None else f'{ratio:.2f}x'} |")


if __name__ == "__main__":
    main()
