"""End-to-end: corrupt or inconsistent quantized model directories fail cleanly, never crash.

Writes an int4 (group 32, asymmetric) and an fp8 copy of tiny_qwen2 with `sampan quantize`, then
breaks copies of them: a missing weight_scale or weight_zero, a scale with the wrong group count,
a config whose group size disagrees with the tensors, a packed weight of the wrong shape or type,
and malformed "quantization_config" sections. For each, `sampan info` and `sampan logits` must
exit 1 (never a signal) with one last stderr line "error: ..." naming the file and the tensor or
config key concerned.
"""

import json
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402

SRC = "tiny_qwen2"  # hidden 128: every int4 group size divides it; intermediate 212 does not
GATE = "model.layers.0.mlp.gate_proj"


def read_raw(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def write_tensors(path, header, data, drop=(), replace=None):
    """Rewrites a safetensors file without the tensors in `drop` and with `replace`
    {name: (dtype, shape, bytes)} substituted, keeping every other tensor's bytes."""
    replace = replace or {}
    out_header, chunks, offset = {}, [], 0
    items = [(k, v) for k, v in header.items() if k != "__metadata__"]
    items.sort(key=lambda kv: kv[1]["data_offsets"][0])
    for name, info in items:
        if name in drop:
            continue
        if name in replace:
            dtype, shape, raw = replace[name]
        else:
            b, e = info["data_offsets"]
            dtype, shape, raw = info["dtype"], info["shape"], data[b:e]
        out_header[name] = {"dtype": dtype, "shape": shape,
                            "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(out_header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def weights_file(d):
    return os.path.join(d, "model.safetensors")


def corrupt_tensors(d, **kw):
    header, data = read_raw(weights_file(d))
    write_tensors(weights_file(d), header, data, **kw)


def edit_config(d, fn):
    path = os.path.join(d, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    fn(cfg)
    with open(path, "w") as f:
        json.dump(cfg, f)


def set_q(key, value):
    def fn(cfg):
        if value is None:
            cfg["quantization_config"].pop(key, None)
        else:
            cfg["quantization_config"][key] = value
    return fn


def shape_of(d, name):
    header, _ = read_raw(weights_file(d))
    return header[name]["shape"]


def main():
    args = eu.parse_args(__doc__.splitlines()[0])
    res = eu.Results()
    eu.require_binary(args, res)
    src = os.path.join(eu.models_dir(args), SRC)
    bases = {}
    for name, flags in (("int4", ["--scheme", "int4", "--group-size", "32", "--asymmetric"]),
                        ("fp8", ["--scheme", "fp8"])):
        out = os.path.join(args.work_dir, f"base_{name}")
        shutil.rmtree(out, ignore_errors=True)
        run = eu.run_sampan(args, ["quantize", "--model", src, "--out", out] + flags)
        if not res.check(f"base.{name}", run.returncode == 0, run.describe()):
            res.finish()
        bases[name] = out

    rows = shape_of(bases["int4"], GATE + ".weight")[0]
    scale = GATE + ".weight_scale"
    cases = [
        # (case, base, how to break it, what the error line must contain)
        ("missing_scale", "int4", lambda d: corrupt_tensors(d, drop={scale}),
         ["model.safetensors", f"'{scale}' is missing"]),
        ("missing_zero", "int4", lambda d: corrupt_tensors(d, drop={GATE + ".weight_zero"}),
         [f"'{GATE}.weight_zero' is missing"]),
        ("wrong_group_count", "int4",
         lambda d: corrupt_tensors(d, replace={scale: ("F16", [rows, 2], bytes(rows * 4))}),
         [f"'{scale}'", "F16[", ", 2]", "group size 32"]),
        ("config_group_size", "int4", lambda d: edit_config(d, set_q("group_size", 64)),
         [f"'model.layers.0.self_attn.q_proj.weight_scale'", "group size 64"]),
        ("weight_shape", "int4",
         lambda d: corrupt_tensors(d, replace={GATE + ".weight": ("I8", [rows, 128],
                                                                  bytes(rows * 128))}),
         [f"'{GATE}.weight'", "expected I8["]),
        ("weight_dtype", "fp8",
         lambda d: corrupt_tensors(d, replace={GATE + ".weight": ("I8", [rows, 128],
                                                                  bytes(rows * 128))}),
         [f"'{GATE}.weight'", "expected F8_E4M3["]),
        ("fp8_missing_scale", "fp8", lambda d: corrupt_tensors(d, drop={scale}),
         [f"'{scale}' is missing"]),
        ("fp8_scale_shape", "fp8",
         lambda d: corrupt_tensors(d, replace={scale: ("F32", [rows, 1], bytes(rows * 4))}),
         [f"'{scale}'", "expected F32["]),
        ("bad_format", "int4", lambda d: edit_config(d, set_q("format", "int2")),
         ["config.json", "quantization_config.format"]),
        ("missing_format", "int4", lambda d: edit_config(d, set_q("format", None)),
         ["config.json", "'quantization_config.format' is missing"]),
        ("bad_scale_dtype", "int4", lambda d: edit_config(d, set_q("scale_dtype", "f8")),
         ["quantization_config.scale_dtype"]),
        ("symmetric_not_bool", "int4", lambda d: edit_config(d, set_q("symmetric", "yes")),
         ["quantization_config.symmetric"]),
        ("section_not_object", "int4",
         lambda d: edit_config(d, lambda c: c.__setitem__("quantization_config", [1])),
         ["config.json", "quantization_config"]),
        ("bad_rotation", "int4",
         lambda d: edit_config(d, set_q("rotation", {"method": "hadamard", "seed": -1,
                                                     "down_proj_block": 4})),
         ["quantization_config.rotation.seed"]),
        ("rotation_block", "int4",
         lambda d: edit_config(d, set_q("rotation", {"method": "hadamard", "seed": 1,
                                                     "down_proj_block": 3})),
         ["quantization_config.rotation.down_proj_block"]),
        ("other_quant_method", "int4", lambda d: edit_config(d, set_q("quant_method", "gptq")),
         ["quant_method 'gptq'"]),
    ]
    for case, base, breaker, needles in cases:
        d = os.path.join(args.work_dir, case)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(bases[base], d)
        breaker(d)
        for cmd in (["info", "--model", d],
                    ["logits", "--model", d, "--ids", "1,2,3", "--out",
                     os.path.join(args.work_dir, f"{case}.npy")]):
            run = eu.run_sampan(args, cmd)
            last = run.last_stderr_line()
            ok = (run.returncode == 1 and last.startswith("error: ") and
                  all(n in last for n in needles))
            res.check(f"{case}.{cmd[0]}", ok,
                      last if ok else run.describe() + f"\n(expected exit 1 and {needles})")
    res.finish()


if __name__ == "__main__":
    main()
