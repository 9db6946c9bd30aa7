"""End-to-end: bad input to `sampan eval` ends in one "error: ..." line and a non-zero exit code
(never a crash), naming what is wrong. Runs under ASan+UBSan too (label e2e_bad).

Uses a small random Llama with the llama-spm tokenizer (vocab 32000, hidden 64, 2 layers, written
here with numpy: no corpus fit needed) and tiny_llama3 (vocab 397) for the vocabulary mismatch.
"""

import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402


def make_random_model(args):
    import safetensors_io  # from tests/reference (put on sys.path by parse_args)

    out = os.path.join(args.work_dir, "random_spm")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    tok_dir = os.path.join(args.source_dir, "tests", "data", "tokenizers", "llama-spm")
    vocab, d, ffn, n_layer, n_head, n_kv = 32000, 64, 96, 2, 4, 2
    hd = d // n_head
    rng = np.random.default_rng(7)
    t = {"model.embed_tokens.weight": rng.normal(0, 1, (vocab, d)),
         "lm_head.weight": rng.normal(0, 0.1, (vocab, d)), "model.norm.weight": np.ones(d)}
    for i in range(n_layer):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = np.ones(d)
        t[p + "post_attention_layernorm.weight"] = np.ones(d)
        t[p + "self_attn.q_proj.weight"] = rng.normal(0, 0.1, (n_head * hd, d))
        t[p + "self_attn.k_proj.weight"] = rng.normal(0, 0.1, (n_kv * hd, d))
        t[p + "self_attn.v_proj.weight"] = rng.normal(0, 0.1, (n_kv * hd, d))
        t[p + "self_attn.o_proj.weight"] = rng.normal(0, 0.1, (d, n_head * hd))
        t[p + "mlp.gate_proj.weight"] = rng.normal(0, 0.1, (ffn, d))
        t[p + "mlp.up_proj.weight"] = rng.normal(0, 0.1, (ffn, d))
        t[p + "mlp.down_proj.weight"] = rng.normal(0, 0.1, (d, ffn))
    safetensors_io.save_file({k: np.asarray(v, dtype=np.float32) for k, v in t.items()},
                             os.path.join(out, "model.safetensors"), dtypes={k: "BF16" for k in t})
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
           "hidden_size": d, "intermediate_size": ffn, "num_hidden_layers": n_layer,
           "num_attention_heads": n_head, "num_key_value_heads": n_kv,
           "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
           "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 1,
           "eos_token_id": 2}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(tok_dir, name)):
            shutil.copy(os.path.join(tok_dir, name), out)
    return out


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def expect_error(res, name, run, needles):
    """needles: substrings (each a list of alternatives) the error line must contain."""
    line = run.last_stderr_line()
    ok = (not run.timed_out and run.returncode is not None and run.returncode > 0
          and line.startswith("error:") and "\n" not in line)
    missing = [alts for alts in needles if not any(n.lower() in line.lower() for n in alts)]
    res.check(name, ok and not missing,
              f"last stderr line {line!r}" if ok and not missing else
              (f"missing {missing} in {line!r}" if ok else run.describe()))


def main():
    args = eu.parse_args(__doc__)
    res = eu.Results()
    eu.require_binary(args, res)
    model = make_random_model(args)
    text = write(os.path.join(args.work_dir, "text.txt"),
                 "The quick brown fox jumps over the lazy dog. " * 20)
    empty = write(os.path.join(args.work_dir, "empty.txt"), "")
    small_vocab = os.path.join(eu.models_dir(args), "tiny_llama3")

    # A well-formed run first, so every failure below is down to the one bad input.
    ok = eu.run_sampan(args, ["eval", "--model", model, "--text", text, "--ctx", "32",
                              "--threads", "1"])
    res.check("good input runs", ok.returncode == 0 and "perplexity" in ok.stdout, ok.describe())

    cases = [
        ("missing model dir", ["--model", os.path.join(args.work_dir, "no_such_model"),
                               "--text", text], [["no_such_model"]]),
        ("missing text file", ["--model", model, "--text",
                               os.path.join(args.work_dir, "no_such_text.txt")],
         [["no_such_text.txt"]]),
        ("empty text file", ["--model", model, "--text", empty], [["empty.txt"], ["empty"]]),
        ("ctx 1", ["--model", model, "--text", text, "--ctx", "1"], [["--ctx"]]),
        ("ctx 0", ["--model", model, "--text", text, "--ctx", "0"], [["--ctx"]]),
        ("ctx negative", ["--model", model, "--text", text, "--ctx", "-5"], [["--ctx"]]),
        ("ctx beyond the model's positions", ["--model", model, "--text", text, "--ctx", "100000"],
         [["--ctx"], ["context", "position"]]),
        ("max-tokens 1", ["--model", model, "--text", text, "--max-tokens", "1"],
         [["--max-tokens"]]),
        ("vocabulary mismatch", ["--model", model, "--text", text, "--ctx", "32", "--ref-model",
                                 small_vocab],
         [["vocab"], ["tiny_llama3"]]),
        ("missing reference dir", ["--model", model, "--text", text, "--ctx", "32", "--ref-model",
                                   os.path.join(args.work_dir, "no_such_ref")], [["no_such_ref"]]),
        ("unwritable json", ["--model", model, "--text", text, "--ctx", "32", "--json",
                             os.path.join(args.work_dir, "no_such_dir", "out.json")],
         [["no_such_dir"]]),
        ("bad kv dtype", ["--model", model, "--text", text, "--kv-cache-dtype", "int3"],
         [["kv-cache-dtype"]]),
        ("bad quantization", ["--model", model, "--text", text, "--quantization", "int2"],
         [["quantization"]]),
        ("missing --text", ["--model", model], [["--text"]]),
    ]
    for name, argv, needles in cases:
        expect_error(res, name, eu.run_sampan(args, ["eval"] + argv), needles)
    res.finish()


if __name__ == "__main__":
    main()
