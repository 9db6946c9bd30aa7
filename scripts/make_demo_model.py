#!/usr/bin/env python3
"""Makes Sampan's demo model: a small LlamaForCausalLM with a real tokenizer whose weights are
*fitted in seconds* to bigram statistics of English text, so that generation produces words of
the corpus in plausible order (it is a bigram model dressed as a transformer, not a language
model: its attention and MLP blocks are present and run, but their output projections are zero,
so the residual stream carries the token embedding straight to the LM head).

How the fit works (all numpy):
  * corpus: the docstrings of a fixed list of Python standard-library modules (present on every
    machine with Python 3), tokenized with the demo tokenizer (HF `tokenizers`);
  * for the K most frequent tokens, L[a, b] = log P(b | a) - log P(b) (add-alpha smoothed);
  * L ~= A Bᵀ by truncated SVD (rank r = hidden - 2);
  * embedding row a = [A[a], pad(a), beta]: pad makes every row the same norm, so RMSNorm scales
    all rows alike; lm_head row b = [B[b] * s, 0, log P(b) * s / beta] puts the unigram log-prob in
    as a bias through the constant coordinate. Tokens outside the K get a bias of -30.

Usage: make_demo_model.py --tokenizer-dir DIR --out DIR
"""
import argparse
import warnings
import importlib
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "reference"))
import safetensors_io  # noqa: E402

MODULES = ["abc", "argparse", "array", "asyncio", "base64", "bisect", "calendar", "cmd", "codecs",
           "collections", "configparser", "contextlib", "copy", "csv", "dataclasses", "datetime",
           "decimal", "difflib", "email", "enum", "fileinput", "fnmatch", "fractions", "functools",
           "getopt", "gettext", "glob", "gzip", "hashlib", "heapq", "hmac", "html", "http",
           "imaplib", "inspect", "io", "ipaddress", "itertools", "json", "locale", "logging",
           "mailbox", "math", "mimetypes", "numbers", "operator", "optparse", "os", "pathlib",
           "pickle", "pkgutil", "platform", "plistlib", "pprint", "queue", "random", "re",
           "sched", "secrets", "selectors", "shelve", "shlex", "shutil", "signal", "smtplib",
           "socket", "sqlite3", "statistics", "string", "struct", "subprocess", "tarfile",
           "tempfile", "textwrap", "threading", "timeit", "tokenize", "traceback", "types",
           "typing", "unittest", "urllib", "uuid", "warnings", "wave", "weakref", "zipfile"]

CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ message['role'] }}: "
                 "{{ message['content'] | trim }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


def corpus_texts():
    texts = []
    for name in MODULES:
        try:
            mod = importlib.import_module(name)
        except Exception:  # a module missing on some build: the corpus is just smaller
            continue
        docs = [getattr(mod, "__doc__", None)]
        for attr in sorted(dir(mod)):
            if attr.startswith("_"):
                continue
            docs.append(getattr(getattr(mod, attr, None), "__doc__", None))
        for d in docs:
            if isinstance(d, str) and len(d) > 40:
                texts.append(" ".join(d.split()))
    return sorted(set(texts))


def fit(ids_list, vocab, eos, k_top, rank, alpha=0.1):
    counts = np.bincount(np.concatenate(ids_list), minlength=vocab).astype(np.float64)
    counts[eos] += len(ids_list)
    top = np.argsort(-counts, kind="stable")[:k_top]
    index = np.full(vocab, -1, dtype=np.int64)
    index[top] = np.arange(len(top))
    big = np.zeros((len(top), len(top)))
    for ids in ids_list:
        seq = np.concatenate([ids, [eos]])
        a, b = index[seq[:-1]], index[seq[1:]]
        keep = (a >= 0) & (b >= 0)
        np.add.at(big, (a[keep], b[keep]), 1.0)
    uni = counts[top] + alpha
    log_uni = np.log(uni / uni.sum())
    cond = big + alpha * uni / uni.sum() * len(top)
    log_cond = np.log(cond / cond.sum(axis=1, keepdims=True))
    resid = log_cond - log_uni[None, :]
    u, s, vt = np.linalg.svd(resid, full_matrices=False)
    a_mat = u[:, :rank] * np.sqrt(s[:rank])
    b_mat = vt[:rank].T * np.sqrt(s[:rank])
    return top, log_uni, a_mat, b_mat


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--top", type=int, default=3000)
    args = ap.parse_args()
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(args.tokenizer_dir, "tokenizer.json"))
    cfg_path = os.path.join(args.tokenizer_dir, "tokenizer_config.json")
    tcfg = json.load(open(cfg_path)) if os.path.exists(cfg_path) else {}
    vocab = tok.get_vocab_size()
    eos_text = tcfg.get("eos_token") or "</s>"
    eos_text = eos_text["content"] if isinstance(eos_text, dict) else eos_text
    bos_text = tcfg.get("bos_token") or "<s>"
    bos_text = bos_text["content"] if isinstance(bos_text, dict) else bos_text
    eos, bos = tok.token_to_id(eos_text), tok.token_to_id(bos_text)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        texts = corpus_texts()
    ids_list = [np.array(tok.encode(t, add_special_tokens=False).ids, dtype=np.int64) for t in texts]
    ids_list = [x for x in ids_list if len(x) > 1]
    d = args.hidden
    top, log_uni, a_mat, b_mat = fit(ids_list, vocab, eos, args.top, d - 2)

    beta = 1.0
    norms2 = (a_mat ** 2).sum(axis=1)
    r2 = norms2.max() * 1.01 + 1e-3
    emb = np.zeros((vocab, d))
    emb[:, d - 2] = np.sqrt(r2)  # rare tokens: no bigram information, unigram bias only
    emb[:, d - 1] = beta
    emb[top, : d - 2] = a_mat
    emb[top, d - 2] = np.sqrt(r2 - norms2)
    # RMSNorm maps every row to row * sqrt(d) / |row|; undo that constant in the head.
    row_norm = np.sqrt(r2 + beta ** 2)
    s = row_norm / np.sqrt(d)
    head = np.zeros((vocab, d))
    head[:, d - 1] = -30.0 * s / beta
    head[top, : d - 2] = b_mat * s
    head[top, d - 1] = log_uni * s / beta
    if bos is not None:
        head[bos, d - 1] = -30.0 * s / beta

    rng = np.random.default_rng(0)
    n_layer, n_head, n_kv, hd, ffn = 2, 4, 2, d // 4, 2 * d
    tensors = {"model.embed_tokens.weight": emb, "lm_head.weight": head,
               "model.norm.weight": np.ones(d)}
    for i in range(n_layer):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = np.ones(d)
        tensors[p + "post_attention_layernorm.weight"] = np.ones(d)
        tensors[p + "self_attn.q_proj.weight"] = rng.normal(0, 0.1, (n_head * hd, d))
        tensors[p + "self_attn.k_proj.weight"] = rng.normal(0, 0.1, (n_kv * hd, d))
        tensors[p + "self_attn.v_proj.weight"] = rng.normal(0, 0.1, (n_kv * hd, d))
        tensors[p + "self_attn.o_proj.weight"] = np.zeros((d, n_head * hd))
        tensors[p + "mlp.gate_proj.weight"] = rng.normal(0, 0.1, (ffn, d))
        tensors[p + "mlp.up_proj.weight"] = rng.normal(0, 0.1, (ffn, d))
        tensors[p + "mlp.down_proj.weight"] = np.zeros((d, ffn))
    os.makedirs(args.out, exist_ok=True)
    safetensors_io.save_file({k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()},
                             os.path.join(args.out, "model.safetensors"),
                             dtypes={k: "BF16" for k in tensors})
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": d, "intermediate_size": ffn, "num_hidden_layers": n_layer,
        "num_attention_heads": n_head, "num_key_value_heads": n_kv, "head_dim": hd,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "bos_token_id": bos, "eos_token_id": eos,
    }
    json.dump(config, open(os.path.join(args.out, "config.json"), "w"), indent=2)
    shutil.copy(os.path.join(args.tokenizer_dir, "tokenizer.json"), args.out)
    tcfg = dict(tcfg)
    tcfg["chat_template"] = CHAT_TEMPLATE
    json.dump(tcfg, open(os.path.join(args.out, "tokenizer_config.json"), "w"), indent=2)
    n_tok = sum(len(x) for x in ids_list)
    print(f"demo model: {args.out} (vocab {vocab}, hidden {d}, fitted on {len(ids_list)} "
          f"docstrings, {n_tok} tokens, top {len(top)} tokens)")


if __name__ == "__main__":
    main()
