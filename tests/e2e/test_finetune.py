#!/usr/bin/env python3
"""`sampan finetune` end to end on the serving test model (a real tokenizer and chat template),
trained on real text available offline: the Python documentation's topic pages
(pydoc_data.topics), cut into paragraphs, whole topics held out for evaluation.

Checks, each against something Sampan did not compute:
  * the adapter directory is PEFT's format: adapter_config.json keys and values, tensor names
    base_model.model.model.layers.N.<self_attn|mlp>.<module>.lora_{A,B}.weight, A [r, in] and
    B [out, r] (shapes from config.json);
  * the held-out loss Sampan reports at the end equals a numpy float64 forward
    (tests/reference/numpy_llama.py) of the base with W + (alpha/r)·B·A merged from the written
    adapter, on the same examples — and it is lower than at step 0 (a measured check);
  * `sampan logits --lora OUT` equals the same numpy reference (cosine >= 0.9999);
  * --log-format json: one JSON object per line, a step event per step;
  * same seed, same adapter bytes; Ctrl-C (SIGINT) mid-run exits 130 with a checkpoint, and
    --resume from it finishes with exactly the adapter of the uninterrupted run.
"""

import json
import math
import os
import shutil
import signal
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util  # noqa: E402
import serve_util  # noqa: E402

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SEQ_LEN = 48


def paragraphs():
    """(train, heldout) lists of paragraphs, deterministic for a given Python installation."""
    import pydoc_data.topics as topics
    train, held = [], []
    for i, name in enumerate(sorted(topics.topics)):
        text = topics.topics[name]
        paras = [" ".join(p.split()) for p in text.split("\n\n")]
        paras = [p for p in paras if 80 <= len(p) <= 600]
        (held if i % 8 == 3 else train).extend(paras)
    return train, held


def write_jsonl(path, texts):
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")


def module_shape(cfg, m):
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    hd = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h)}[m]


def tensor_name(layer, m, ab):
    part = "mlp" if m in ("gate_proj", "up_proj", "down_proj") else "self_attn"
    return f"base_model.model.model.layers.{layer}.{part}.{m}.lora_{ab}.weight"


def merged_model(base, adapter_dir, out):
    """base + (alpha/r)·B·A in float64 saved as f32 (the reference's own merge, in numpy)."""
    import safetensors_io
    cfg = json.load(open(os.path.join(base, "config.json")))
    acfg = json.load(open(os.path.join(adapter_dir, "adapter_config.json")))
    scale = acfg["lora_alpha"] / acfg["r"]
    lora = safetensors_io.load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    weights = safetensors_io.load_model_tensors(base)
    for layer in range(cfg["num_hidden_layers"]):
        for m in acfg["target_modules"]:
            part = "mlp" if m in ("gate_proj", "up_proj", "down_proj") else "self_attn"
            key = f"model.layers.{layer}.{part}.{m}.weight"
            a = lora[tensor_name(layer, m, "A")].astype(np.float64)
            b = lora[tensor_name(layer, m, "B")].astype(np.float64)
            weights[key] = (weights[key].astype(np.float64) + scale * (b @ a)).astype(np.float32)
    os.makedirs(out, exist_ok=True)
    safetensors_io.save_file({k: v.astype(np.float32) for k, v in weights.items()},
                             os.path.join(out, "model.safetensors"))
    cfg = dict(cfg, torch_dtype="float32")
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"))
    return out


def tokenize(args, model, texts):
    r = e2e_util.run_sampan(args, ["tokenize", "--model", model] +
                            sum((["--text", t] for t in texts), []))
    if r.returncode != 0:
        return None, r.describe()
    return [[int(x) for x in line.split()] for line in r.stdout.strip("\n").split("\n")], ""


def json_lines(text):
    events = []
    for line in text.strip("\n").split("\n"):
        events.append(json.loads(line))
    return events


def finetune(args, model, out, data, extra, log_json=True):
    argv = ["finetune", "--model", model, "--data", data, "--out", out, "--seq-len", str(SEQ_LEN),
            "--threads", "2"] + extra + (["--log-format", "json"] if log_json else [])
    return e2e_util.run_sampan(args, argv)


def check_gguf_base(args, res, work, train_path, held_path, common):
    import gguf_models
    import numpy_llama
    src = os.path.join(work, "gguf-src")
    gguf_models.make_llama_dir(src, hidden=64, ffn=128, layers=2, heads=4, kv_heads=2, vocab=320,
                               seed=3)
    f16 = gguf_models.hf_to_gguf(src, os.path.join(work, "base-f16.gguf"), "f16")
    f16 = f16[0] if isinstance(f16, (list, tuple)) else f16
    q8 = gguf_models.quantize(f16, os.path.join(work, "base-q8_0.gguf"), "Q8_0")
    for name, path in (("F16", f16), ("Q8_0", q8)):
        out = os.path.join(work, f"gguf-{name}")
        r = finetune(args, path, out, train_path, common[2:])
        if not res.check(f"finetune on a GGUF {name} base runs", r.returncode == 0, r.describe()):
            continue
        ev = [e for e in json_lines(r.stdout) if e.get("event") == "eval"]
        res.check(f"GGUF {name} base: held-out loss went down", len(ev) == 2 and
                  ev[-1]["eval_loss"] < ev[0]["eval_loss"] - 0.05,
                  " -> ".join(f"{e['eval_loss']:.4f}" for e in ev))
        if name != "F16":
            continue
        ref_dir = merged_model(src, out, os.path.join(work, "gguf-merged-ref"))
        ids = [1, 40, 77, 120, 5, 260, 300, 17, 99, 3]
        npy = os.path.join(work, "gguf_lora_logits.npy")
        r = e2e_util.run_sampan(args, ["logits", "--model", path, "--lora", out, "--ids",
                                       ",".join(map(str, ids)), "--out", npy])
        got, why = e2e_util.load_logits(npy, len(ids), 320) if r.returncode == 0 else (None, r.describe())
        if res.check("GGUF F16 base: logits --lora", got is not None, why):
            cos = e2e_util.cosine_per_row(got, numpy_llama.logits(ref_dir, ids))
            res.check("GGUF F16 base: logits --lora == numpy merge", cos.min() >= 0.9999,
                      f"min cosine {cos.min():.7f}")


def main():
    args = e2e_util.parse_args(__doc__.split("\n")[0])
    res = e2e_util.Results()
    e2e_util.require_binary(args, res)
    model = serve_util.make_serve_model(args)
    cfg = json.load(open(os.path.join(model, "config.json")))
    work = os.path.join(args.work_dir, "finetune")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    train, held = paragraphs()
    res.check("corpus", len(train) >= 200 and len(held) >= 20,
              f"{len(train)} training and {len(held)} held-out paragraphs")
    held = held[:24]
    train_path, held_path = os.path.join(work, "train.jsonl"), os.path.join(work, "held.jsonl")
    write_jsonl(train_path, train)
    write_jsonl(held_path, held)

    common = ["--data", train_path, "--eval-data", held_path, "--rank", "8", "--alpha", "16",
              "--dropout", "0.05", "--targets", ",".join(MODULES), "--lr", "3e-3",
              "--steps", "40", "--batch-size", "8", "--warmup", "4", "--seed", "7",
              "--weight-decay", "0.01"]
    out = os.path.join(work, "adapter")
    r = finetune(args, model, out, train_path, common[2:] + ["--eval-every", "20"])
    if not res.check("finetune runs", r.returncode == 0, r.describe()):
        res.finish()
    try:
        events = json_lines(r.stdout)
        ok_json = True
    except ValueError as e:
        events, ok_json = [], False
        res.check("json log lines", False, str(e))
    steps = [e for e in events if e.get("event") == "step"]
    evals = [e for e in events if e.get("event") == "eval"]
    if ok_json:
        res.check("json log: a step event per step", [e["step"] for e in steps] == list(range(1, 41)),
                  f"{len(steps)} step events")
        res.check("json log: start and done", events[0].get("event") == "start" and
                  events[-1].get("event") == "done", f"{events[0]} ... {events[-1]}")
        res.check("json log: finite losses", all(math.isfinite(e["loss"]) for e in steps))
    res.check("eval at 0, 20 and 40", [e["step"] for e in evals] == [0, 20, 40],
              str([(e["step"], round(e["eval_loss"], 4)) for e in evals]))

    # PEFT format.
    acfg = json.load(open(os.path.join(out, "adapter_config.json")))
    want = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "bias": "none",
            "task_type": "CAUSAL_LM", "base_model_name_or_path": model}
    res.check("adapter_config.json", all(acfg.get(k) == v for k, v in want.items()) and
              sorted(acfg.get("target_modules", [])) == sorted(MODULES) and
              abs(acfg.get("lora_dropout", -1) - 0.05) < 1e-12, json.dumps(acfg))
    import safetensors_io
    header, _, _ = safetensors_io.read_header(os.path.join(out, "adapter_model.safetensors"))
    names = set(header)
    expect = {}
    for layer in range(cfg["num_hidden_layers"]):
        for m in MODULES:
            fin, fout = module_shape(cfg, m)
            expect[tensor_name(layer, m, "A")] = [8, fin]
            expect[tensor_name(layer, m, "B")] = [fout, 8]
    res.check("adapter tensor names are peft's", names == set(expect),
              f"extra {sorted(names - set(expect))[:3]}, missing {sorted(set(expect) - names)[:3]}")
    res.check("adapter tensor shapes", all(header[k]["shape"] == v for k, v in expect.items()
                                           if k in header))

    # Held-out loss: Sampan's report vs numpy float64 with the adapter merged by numpy.
    import numpy_llama
    ref_dir = merged_model(model, out, os.path.join(work, "merged-ref"))
    ids, why = tokenize(args, model, held)
    if res.check("tokenize held-out", ids is not None, why):
        nll, count = 0.0, 0
        bos, eos = cfg["bos_token_id"], cfg["eos_token_id"]
        for seq in ids:
            seq = ([bos] if not seq or seq[0] != bos else []) + seq + [eos]
            seq = seq[:SEQ_LEN]
            lg = numpy_llama.logits(ref_dir, seq)
            lg = lg - lg.max(axis=1, keepdims=True)
            logp = lg - np.log(np.exp(lg).sum(axis=1, keepdims=True))
            for t in range(len(seq) - 1):
                nll -= logp[t, seq[t + 1]]
                count += 1
        ref_loss = nll / count
        final = evals[-1]["eval_loss"] if evals else float("nan")
        res.check("final eval loss == numpy reference", abs(final - ref_loss) <= 1e-4 * ref_loss,
                  f"sampan {final:.6f} numpy {ref_loss:.6f}")
        res.check("held-out loss went down", evals and final < evals[0]["eval_loss"] - 0.05,
                  f"{evals[0]['eval_loss']:.4f} -> {final:.4f}" if evals else "no evals")

        # logits --lora vs the numpy merge.
        seq = ids[0][:32]
        npy = os.path.join(work, "lora_logits.npy")
        r = e2e_util.run_sampan(args, ["logits", "--model", model, "--lora", out, "--ids",
                                       ",".join(map(str, seq)), "--out", npy])
        if res.check("logits --lora runs", r.returncode == 0, r.describe()):
            got, why = e2e_util.load_logits(npy, len(seq), cfg["vocab_size"])
            if res.check("logits --lora output", got is not None, why):
                cos = e2e_util.cosine_per_row(got, numpy_llama.logits(ref_dir, seq))
                res.check("logits --lora == numpy merge", cos.min() >= 0.9999,
                          f"min cosine {cos.min():.7f}")

    # QLoRA-style: the base quantized to int4 on load stays quantized; the held-out loss still
    # goes down.
    qdir = os.path.join(work, "qlora")
    r = finetune(args, model, qdir, train_path,
                 common[2:] + ["--quantization", "int4", "--group-size", "32"])
    if res.check("finetune on an int4 base runs", r.returncode == 0, r.describe()):
        ev = [e for e in json_lines(r.stdout) if e.get("event") == "eval"]
        res.check("int4 base: held-out loss went down", len(ev) == 2 and
                  ev[-1]["eval_loss"] < ev[0]["eval_loss"] - 0.05,
                  " -> ".join(f"{e['eval_loss']:.4f}" for e in ev))

    # A GGUF base (F16 and llama.cpp's Q8_0), its tokenizer from the metadata: training lowers the
    # held-out loss, and `logits --lora` on the GGUF file equals numpy on the HF weights with the
    # adapter merged (the F16 rounding of the base is all that separates them).
    check_gguf_base(args, res, work, train_path, held_path, common)

    # Determinism and resume.
    short = common[2:]
    # Enough steps that the SIGINT below lands well before the end.
    short[short.index("--steps") + 1] = "30"
    a_dir, b_dir, c_dir = (os.path.join(work, n) for n in ("a", "b", "c"))
    ra = finetune(args, model, a_dir, train_path, short)
    rb = finetune(args, model, b_dir, train_path, short)
    res.check("repeat runs succeed", ra.returncode == 0 and rb.returncode == 0,
              ra.describe() + "\n" + rb.describe())

    def adapter_bytes(d):
        p = os.path.join(d, "adapter_model.safetensors")
        return open(p, "rb").read() if os.path.exists(p) else b""

    res.check("same seed, same adapter", adapter_bytes(a_dir) and
              adapter_bytes(a_dir) == adapter_bytes(b_dir))

    # Ctrl-C after step 3 has been logged, then --resume.
    argv = [args.sampan, "finetune", "--model", model, "--data", train_path, "--out", c_dir,
            "--seq-len", str(SEQ_LEN), "--threads", "2", "--log-format", "json"] + short
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    interrupted_at = None
    for line in p.stdout:
        ev = json.loads(line)
        if ev.get("event") == "step" and ev["step"] >= 3 and interrupted_at is None:
            p.send_signal(signal.SIGINT)
            interrupted_at = ev["step"]
    p.wait(timeout=e2e_util.RUN_TIMEOUT_S)
    err = p.stderr.read()
    res.check("Ctrl-C exits 130 with a checkpoint", p.returncode == 130 and
              os.path.exists(os.path.join(c_dir, "checkpoint", "trainer_state.safetensors")),
              f"exit {p.returncode}, interrupted after step {interrupted_at}; {err[-300:]}")
    rc = finetune(args, model, c_dir, train_path, short + ["--resume"])
    res.check("--resume finishes", rc.returncode == 0, rc.describe())
    res.check("interrupted + resumed == uninterrupted (bit-exact)",
              adapter_bytes(c_dir) and adapter_bytes(c_dir) == adapter_bytes(a_dir))
    res.finish()


if __name__ == "__main__":
    main()
