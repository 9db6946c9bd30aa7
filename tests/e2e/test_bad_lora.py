"""End-to-end: broken LoRA adapters and bases make `--lora` and `merge-lora` fail cleanly.

Each case is a broken copy of a peft-made fixture (tests/data/lora) in --work-dir. `sampan logits
--lora` and `sampan merge-lora` must exit with a code > 0 (a negative code is a crash), and
stderr must hold exactly one line "error: <message>", the last, naming the file and the key or
tensor at fault (for an adapter of another base: the tensor and both shapes).
"""

import json
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402

BASE = "tiny_llama3"
GOOD = "llama3_all"
CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
Q_A = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
O_A = "base_model.model.model.layers.0.self_attn.o_proj.lora_A.weight"
V_B = "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"


def copy_adapter(args, case, src=GOOD):
    dst = os.path.join(args.work_dir, case)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(os.path.join(args.source_dir, "tests", "data", "lora", src), dst)
    return dst


def edit_config(path, fn):
    p = os.path.join(path, CONFIG)
    with open(p) as f:
        cfg = json.load(f)
    fn(cfg)
    with open(p, "w") as f:
        json.dump(cfg, f)


def read_raw(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def write_raw(path, header, data):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def drop_tensor(path, name):
    """Removes one tensor, repacking the data section so the file stays valid."""
    f = os.path.join(path, WEIGHTS)
    header, data = read_raw(f)
    meta = header.pop("__metadata__", None)
    order = sorted((k for k in header if k != name), key=lambda k: header[k]["data_offsets"][0])
    new_header, chunks, at = {}, [], 0
    for k in order:
        b, e = header[k]["data_offsets"]
        chunks.append(data[b:e])
        new_header[k] = dict(header[k], data_offsets=[at, at + e - b])
        at += e - b
    if meta is not None:
        new_header["__metadata__"] = meta
    write_raw(f, new_header, b"".join(chunks))


def rename_tensor(path, old, new):
    f = os.path.join(path, WEIGHTS)
    header, data = read_raw(f)
    header[new] = header.pop(old)
    write_raw(f, header, data)


# Each case: (name, build(args, case) -> adapter dir, substrings the error line must hold, each
# a group of alternatives).
def case_missing_dir(args, case):
    return os.path.join(args.work_dir, "no_such_adapter"), [["no_such_adapter"]]


def case_missing_config(args, case):
    p = copy_adapter(args, case)
    os.remove(os.path.join(p, CONFIG))
    return p, [[CONFIG]]


def case_missing_weights(args, case):
    p = copy_adapter(args, case)
    os.remove(os.path.join(p, WEIGHTS))
    return p, [[WEIGHTS]]


def case_bad_json(args, case):
    p = copy_adapter(args, case)
    with open(os.path.join(p, CONFIG), "w") as f:
        f.write('{"peft_type": "LORA", "r": 4,')
    return p, [[CONFIG], ["JSON"]]


def case_not_lora(args, case):
    p = copy_adapter(args, case)
    edit_config(p, lambda c: c.update(peft_type="PREFIX_TUNING"))
    return p, [[CONFIG], ["peft_type"], ["PREFIX_TUNING"]]


def case_dora(args, case):
    p = copy_adapter(args, case)
    edit_config(p, lambda c: c.update(use_dora=True))
    return p, [[CONFIG], ["use_dora"], ["DoRA"]]


def case_bias_all(args, case):
    p = copy_adapter(args, case)
    edit_config(p, lambda c: c.update(bias="all"))
    return p, [[CONFIG], ["bias"]]


def case_modules_to_save(args, case):
    p = copy_adapter(args, case)
    edit_config(p, lambda c: c.update(modules_to_save=["lm_head"]))
    return p, [[CONFIG], ["modules_to_save"]]


def case_pissa(args, case):
    p = copy_adapter(args, case)
    edit_config(p, lambda c: c.update(init_lora_weights="pissa_niter_4"))
    return p, [[CONFIG], ["init_lora_weights"], ["pissa"]]


def case_unknown_target(args, case):
    p = copy_adapter(args, case)
    edit_config(p, lambda c: c.update(target_modules=["q_proj", "embed_tokens"]))
    return p, [[CONFIG], ["target_modules"], ["embed_tokens"]]


def case_regex_target(args, case):
    p = copy_adapter(args, case)
    edit_config(p, lambda c: c.update(target_modules=".*attn.*"))
    return p, [[CONFIG], ["target_modules"]]


def case_r_missing(args, case):
    p = copy_adapter(args, case)
    edit_config(p, lambda c: c.pop("r"))
    return p, [[CONFIG], ["'r'"]]


def case_rank_mismatch(args, case):
    p = copy_adapter(args, case)
    edit_config(p, lambda c: c.update(r=8))
    return p, [[WEIGHTS], ["lora_"], ["r = 8"]]


def case_untargeted_tensor(args, case):
    p = copy_adapter(args, case)
    edit_config(p, lambda c: c.update(target_modules=[m for m in c["target_modules"] if m != "o_proj"]))
    return p, [[WEIGHTS], [O_A.replace("lora_A", "lora_"), "o_proj"]]


def case_missing_partner(args, case):
    p = copy_adapter(args, case)
    drop_tensor(p, V_B)
    return p, [[WEIGHTS], [V_B]]


def case_missing_module(args, case):
    p = copy_adapter(args, case)
    drop_tensor(p, Q_A)
    drop_tensor(p, Q_A.replace("lora_A", "lora_B"))
    return p, [[Q_A]]


def case_foreign_tensor(args, case):
    p = copy_adapter(args, case)
    rename_tensor(p, Q_A, "base_model.model.model.embed_tokens.lora_embedding_A")
    return p, [[WEIGHTS], ["lora_embedding_A"]]


def case_other_base(args, case):
    # Made by peft for tiny_qwen2 (hidden 128), loaded onto tiny_llama3 (hidden 96).
    p = copy_adapter(args, case, "qwen2_all")
    return p, [[Q_A], ["[4, 128]"], ["[4, 96]"]]


def case_truncated_weights(args, case):
    p = copy_adapter(args, case)
    f = os.path.join(p, WEIGHTS)
    with open(f, "rb") as fh:
        blob = fh.read()
    with open(f, "wb") as fh:
        fh.write(blob[:len(blob) // 2])
    return p, [[WEIGHTS]]


def case_int_tensor(args, case):
    p = copy_adapter(args, case)
    f = os.path.join(p, WEIGHTS)
    header, data = read_raw(f)
    header[Q_A]["dtype"] = "I32"  # same byte count: the file stays consistent
    write_raw(f, header, data)
    return p, [[WEIGHTS], [Q_A], ["I32"]]


CASES = [v for k, v in sorted(globals().items()) if k.startswith("case_")]


def check_error(res, name, run, required):
    """Exit > 0, exactly one 'error: ...' line on stderr, the last, naming each group."""
    if run.timed_out or run.returncode is None or run.returncode <= 0:
        why = "exit 0 on a broken input" if run.returncode == 0 else "crash or timeout"
        return res.check(name, False, f"{why}; " + run.describe())
    line = run.last_stderr_line()
    errors = [ln for ln in run.stderr.split("\n") if ln.startswith("error:")]
    if not line.startswith("error: ") or len(errors) != 1:
        return res.check(name, False, "want exactly one last line 'error: ...'; " + run.describe())
    missing = [alts for alts in required if not any(a in line for a in alts)]
    if missing:
        want = "; ".join(" or ".join(repr(a) for a in alts) for alts in missing)
        return res.check(name, False, f"error line does not name {want}: {line!r}")
    return res.check(name, True, f"exit {run.returncode}: {line}")


def main():
    args = eu.parse_args(__doc__.splitlines()[0])
    res = eu.Results()
    eu.require_binary(args, res)
    base = os.path.join(eu.models_dir(args), BASE)
    out = os.path.join(args.work_dir, "out.npy")
    merged = os.path.join(args.work_dir, "merged")
    for build in CASES:
        case = build.__name__[len("case_"):]
        adapter, required = build(args, case)
        run = eu.run_sampan(args, ["logits", "--model", base, "--lora", adapter, "--ids", "1,2,3",
                                   "--out", out])
        check_error(res, f"{case}.logits", run, required)
        shutil.rmtree(merged, ignore_errors=True)
        run = eu.run_sampan(args, ["merge-lora", "--model", base, "--lora", adapter, "--out", merged])
        check_error(res, f"{case}.merge_lora", run, required)
        res.check(f"{case}.merge_lora.no_output", not os.path.exists(os.path.join(merged, "model.safetensors")))

    good = os.path.join(args.source_dir, "tests", "data", "lora", GOOD)
    # Bases merge-lora refuses: quantized (sampan quantize's output), GGUF, itself as --out.
    quantized = os.path.join(args.work_dir, "quantized")
    shutil.rmtree(quantized, ignore_errors=True)
    run = eu.run_sampan(args, ["quantize", "--model", base, "--out", quantized, "--scheme", "fp8"])
    if res.check("quantize.runs", run.returncode == 0, "" if run.returncode == 0 else run.describe()):
        shutil.rmtree(merged, ignore_errors=True)
        run = eu.run_sampan(args, ["merge-lora", "--model", quantized, "--lora", good, "--out", merged])
        check_error(res, "quantized_base.merge_lora", run, [[quantized], ["quantized"]])
    fake_gguf = os.path.join(args.work_dir, "model.gguf")
    with open(fake_gguf, "wb") as f:
        f.write(b"GGUF" + b"\0" * 60)
    run = eu.run_sampan(args, ["merge-lora", "--model", fake_gguf, "--lora", good, "--out", merged])
    check_error(res, "gguf_base.merge_lora", run, [["model.gguf"], ["gguf"]])
    run = eu.run_sampan(args, ["merge-lora", "--model", base, "--lora", good, "--out", base])
    check_error(res, "out_is_base.merge_lora", run, [["--out"]])
    res.finish()


if __name__ == "__main__":
    main()
