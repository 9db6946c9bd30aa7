"""Trains a small Llama on real English text, so quantization accuracy is measured on a model
with real-text statistics instead of random weights (run by hand; nothing in CI runs this).

    /work/refenv/bin/python tests/reference/train_small_llama.py \
        [--out /work/models/small-trained] [--heldout-out /work/models/small-trained-heldout.txt]
    /work/refenv/bin/python tests/reference/train_small_llama.py --measure 3   # s/step only

Model: LlamaForCausalLM, vocab 32000 (tests/data/tokenizers/llama-spm), hidden 256, 4 layers,
8 heads / 4 KV heads (GQA), intermediate 768 = 3 x 256 (not a power of two, so Hadamard and group-wise
quantization meet an awkward FFN size), RoPE theta 1e4, untied lm_head, saved in bf16.

Corpus: English prose found offline on any Debian machine with python3.11: the reference text of
pydoc_data/topics.py, the docstrings of the standard library, and /usr/share/common-licenses
(deduplicated: several names there are copies). Whole documents are held out (~5 % of the
characters) and written to --heldout-out, so evaluation text never shares a paragraph with
training text. The exact corpus depends on the installed Python, so its sha256 is recorded in
training_meta.json next to the model; with the same corpus, seed, step count and thread count the
run is bit-for-bit repeatable (single thread, deterministic CPU kernels).

Training: AdamW (betas 0.9/0.95, weight decay on matrices only), linear warmup then cosine decay,
random 257-token windows from the packed training stream, fp32 master weights with bf16 autocast
matmuls (AMX on Sapphire Rapids). The default 220 steps (0.9 M tokens, ~2 epochs) take ~500 s
of one core's CPU time, ~35 min wall on the shared 2-core dev machine; held-out perplexity ~294.
"""

import argparse
import ast
import glob
import hashlib
import json
import math
import os
import random
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOKENIZER_DIR = os.path.join(REPO, "tests", "data", "tokenizers", "llama-spm")

CONFIG = {
    "vocab_size": 32000,
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "intermediate_size": 768,
    "rope_theta": 10000.0,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": False,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "initializer_range": 0.02,
}

BOS, EOS = 1, 2
# Docstrings shorter than this are mostly one-line summaries ("Return self.") that teach little
# prose and would make the held-out text a list of fragments.
MIN_DOCSTRING_CHARS = 200
HELDOUT_FRACTION = 0.05


def topics_documents(path):
    """The pydoc topics dict, read with ast so no foreign module is imported."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == "topics":
            topics = ast.literal_eval(node.value)
            return [("topics:" + k, topics[k]) for k in sorted(topics)]
    raise RuntimeError(f"no `topics` dict in {path}")


def docstring_documents(stdlib_dir):
    docs = []
    files = sorted(glob.glob(os.path.join(stdlib_dir, "*.py")) +
                   glob.glob(os.path.join(stdlib_dir, "*", "*.py")))
    for path in files:
        rel = os.path.relpath(path, stdlib_dir)
        # Test suites and 2to3 fixers are code-heavy; their docstrings are not prose.
        if rel.startswith(("test", "idlelib", "lib2to3", "site-packages", "dist-packages")):
            continue
        try:
            tree = ast.parse(open(path, encoding="utf-8").read())
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        parts = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= MIN_DOCSTRING_CHARS:
                    parts.append(doc)
        if parts:
            docs.append(("docstrings:" + rel, "\n\n".join(parts)))
    return docs


def license_documents(licenses_dir):
    docs, seen = [], set()
    for path in sorted(glob.glob(os.path.join(licenses_dir, "*"))):
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        text = open(path, encoding="utf-8", errors="replace").read()
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest in seen:  # GPL == GPL-3, LGPL == LGPL-3, GFDL == GFDL-1.3
            continue
        seen.add(digest)
        docs.append(("license:" + os.path.basename(path), text))
    return docs


def find_topics(stdlib_dir):
    path = os.path.join(stdlib_dir, "pydoc_data", "topics.py")
    if not os.path.exists(path):
        sys.exit(f"missing {path}; pass --stdlib-dir")
    return path


def load_corpus(args):
    docs = topics_documents(find_topics(args.stdlib_dir))
    docs += docstring_documents(args.stdlib_dir)
    docs += license_documents(args.licenses_dir)
    return docs


def split_documents(docs, seed):
    """Whole documents to held-out until ~HELDOUT_FRACTION of the characters; rest trains."""
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    total = sum(len(t) for _, t in docs)
    held, held_chars = set(), 0
    for i in order:
        if held_chars >= HELDOUT_FRACTION * total:
            break
        # Skip giants so one document cannot take the whole held-out share.
        if len(docs[i][1]) > 0.02 * total:
            continue
        held.add(i)
        held_chars += len(docs[i][1])
    train = [docs[i] for i in range(len(docs)) if i not in held]
    heldout = [docs[i] for i in sorted(held)]
    return train, heldout


def pack(tokenizer, docs):
    """One token stream: <s> document <s> document ... (no </s>: documents are cut, not ended)."""
    ids = []
    for _, text in docs:
        ids.append(BOS)
        ids.extend(tokenizer.encode(text, add_special_tokens=False).ids)
    return ids


def lr_at(step, steps, peak, warmup, floor_ratio):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return peak * (floor_ratio + (1 - floor_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


def make_optimizer(torch, model, lr, weight_decay):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)


def evaluate(torch, model, stream, seq_len, max_windows=None, bf16=True):
    """Mean next-token NLL over consecutive non-overlapping windows of the stream."""
    F = torch.nn.functional
    n_win = (len(stream) - 1) // seq_len
    if max_windows is not None:
        n_win = min(n_win, max_windows)
    data = torch.tensor(stream[: n_win * seq_len + 1], dtype=torch.long)
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for start in range(0, n_win, 8):
            idx = torch.arange(start, min(n_win, start + 8))
            x = torch.stack([data[i * seq_len: i * seq_len + seq_len] for i in idx])
            y = torch.stack([data[i * seq_len + 1: i * seq_len + seq_len + 1] for i in idx])
            logits = model(input_ids=x, use_cache=False).logits.float()
            nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                  reduction="sum")
            total += nll.item()
            count += y.numel()
    model.train()
    return total / count


def build_model(torch, seed):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    config = LlamaConfig(**CONFIG, attn_implementation="sdpa")
    return LlamaForCausalLM(config)


def save(torch, model, out_dir, meta):
    from transformers import GenerationConfig
    os.makedirs(out_dir, exist_ok=True)
    model = model.to(torch.bfloat16)
    model.config.use_cache = True
    model.save_pretrained(out_dir, safe_serialization=True)
    GenerationConfig(bos_token_id=BOS, eos_token_id=EOS).save_pretrained(out_dir)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(TOKENIZER_DIR, name), os.path.join(out_dir, name))
    with open(os.path.join(out_dir, "training_meta.json"), "w") as f:
        json.dump(meta, f, indent=1)


def keep_heap_memory():
    """Stop glibc from unmapping the ~0.5 GB logits buffers after every step: re-faulting them
    cost as much system time as the step's arithmetic."""
    import ctypes
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_trim_threshold, m_mmap_max = -1, -4
    # glibc caps the mmap threshold at 32 MB, so large blocks are kept on the heap by turning
    # mmap off altogether (one thread: everything lives in the main, brk-grown arena).
    libc.mallopt(m_mmap_max, 0)
    libc.mallopt(m_trim_threshold, 1 << 40)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="/work/models/small-trained")
    ap.add_argument("--heldout-out", default="/work/models/small-trained-heldout.txt")
    ap.add_argument("--stdlib-dir", default="/usr/lib/python3.11")
    ap.add_argument("--licenses-dir", default="/usr/share/common-licenses")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=220)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=40)
    ap.add_argument("--no-bf16", action="store_true", help="train with fp32 matmuls")
    ap.add_argument("--measure", type=int, default=0,
                    help="time this many steps, print s/step and tokens/s, save nothing")
    args = ap.parse_args()

    keep_heap_memory()
    import torch
    from tokenizers import Tokenizer

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    F = torch.nn.functional
    bf16 = not args.no_bf16

    docs = load_corpus(args)
    corpus_sha = hashlib.sha256("\0".join(n + "\0" + t for n, t in docs).encode()).hexdigest()
    train_docs, held_docs = split_documents(docs, args.seed)
    tok = Tokenizer.from_file(os.path.join(TOKENIZER_DIR, "tokenizer.json"))
    train_ids = pack(tok, train_docs)
    held_ids = pack(tok, held_docs)
    print(f"corpus: {len(docs)} docs, {sum(len(t) for _, t in docs)} chars, sha256 {corpus_sha[:16]}; "
          f"train {len(train_docs)} docs / {len(train_ids)} tokens, held-out {len(held_docs)} docs / "
          f"{len(held_ids)} tokens", flush=True)

    model = build_model(torch, args.seed)
    n_params = sum(p.numel() for p in model.parameters())
    opt = make_optimizer(torch, model, args.lr, args.weight_decay)
    data = torch.tensor(train_ids, dtype=torch.long)
    gen = torch.Generator().manual_seed(args.seed)
    steps = args.measure if args.measure else args.steps
    window = args.seq_len + 1
    log, evals = [], []
    t0 = time.time()
    c0 = time.process_time()
    model.train()
    for step in range(steps):
        lr = lr_at(step, steps, args.lr, min(args.warmup, max(1, steps // 10)), 0.1)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(train_ids) - window, (args.batch,), generator=gen)
        batch = torch.stack([data[s: s + window] for s in starts.tolist()])
        x, y = batch[:, :-1], batch[:, 1:]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
        opt.step()
        elapsed = time.time() - t0
        log.append({"step": step, "loss": round(loss.item(), 4), "lr": lr,
                    "grad_norm": round(gnorm, 3), "t": round(elapsed, 1)})
        if step % 10 == 0 or step == steps - 1 or args.measure:
            print(f"step {step:4d} loss {loss.item():.4f} lr {lr:.2e} gnorm {gnorm:.2f} "
                  f"{elapsed:.0f}s cpu {time.process_time() - c0:.1f}s", flush=True)
        if not args.measure and args.eval_every and (step + 1) % args.eval_every == 0 \
                and step != steps - 1:
            # 32 windows keep a mid-run eval under ~10 s; the final eval uses everything.
            nll = evaluate(torch, model, held_ids, args.seq_len, max_windows=32, bf16=bf16)
            evals.append({"step": step + 1, "heldout_nll_subset": round(nll, 4)})
            print(f"  eval step {step + 1}: held-out (32 windows) nll {nll:.4f} "
                  f"ppl {math.exp(nll):.1f}", flush=True)
    train_s = time.time() - t0
    if args.measure:
        per = train_s / steps
        print(f"cpu {(time.process_time() - c0) / steps:.2f} s/step; wall {per:.2f} s/step, {args.batch * args.seq_len / per:.0f} tokens/s "
              f"({n_params / 1e6:.1f} M params, bf16 autocast {bf16})")
        return

    held_nll = evaluate(torch, model, held_ids, args.seq_len, bf16=False)
    # Same number of training windows as held-out ones, to show the generalization gap.
    n_held_win = (len(held_ids) - 1) // args.seq_len
    train_nll = evaluate(torch, model, train_ids, args.seq_len, max_windows=n_held_win, bf16=False)
    print(f"final (fp32 eval): held-out nll {held_nll:.4f} ppl {math.exp(held_nll):.2f}; "
          f"train-subset nll {train_nll:.4f} ppl {math.exp(train_nll):.2f}; "
          f"train time {train_s:.0f}s", flush=True)

    with open(args.heldout_out, "w", encoding="utf-8") as f:
        f.write("\n\n".join(t.strip() for _, t in held_docs) + "\n")
    meta = {
        "corpus_sha256": corpus_sha,
        "corpus_docs": len(docs),
        "train_tokens": len(train_ids),
        "heldout_tokens": len(held_ids),
        "heldout_docs": [n for n, _ in held_docs],
        "args": {k: v for k, v in vars(args).items() if k != "measure"},
        "n_params": n_params,
        "torch": torch.__version__,
        "train_seconds": round(train_s, 1),
        "heldout_nll_fp32_before_bf16_save": held_nll,
        "heldout_ppl_fp32_before_bf16_save": math.exp(held_nll),
        "train_subset_nll": train_nll,
        "evals": evals,
        "log": log,
    }
    save(torch, model, args.out, meta)
    print(f"saved {args.out} and {args.heldout_out}")


if __name__ == "__main__":
    main()
