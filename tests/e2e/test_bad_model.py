"""End-to-end: broken models and bad --ids make `sampan` fail cleanly, never crash.

Builds broken copies of the tiny models in --work-dir. For each, `sampan info` and `sampan logits`
must exit with a code > 0 (a negative code means killed by a signal: a crash), and stderr's last
line must be one line "error: <message>" that names the file and, where one is concerned, the
tensor or config key. --device cuda without a visible GPU fails the same way, in one line.
"""

import json
import os
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402

BASE = "tiny_llama3"       # single model.safetensors, bf16, tied embeddings
SHARDED = "tiny_mistral"   # two shards + model.safetensors.index.json
WEIGHTS = "model.safetensors"


def copy_model(args, src_name, case):
    dst = os.path.join(args.work_dir, case)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(os.path.join(eu.models_dir(args), src_name), dst)
    return dst


def read_raw(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def write_raw(path, header, data):
    """Header (any content, offsets taken as given) + data section, padded like the writer."""
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def edit_header(path, fn):
    header, data = read_raw(path)
    fn(header)
    write_raw(path, header, data)


def edit_config(path, fn):
    cfg_path = os.path.join(path, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    fn(cfg)
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)


def write_bytes(path, blob):
    with open(path, "wb") as f:
        f.write(blob)


# Each builder makes one broken model and returns (model dir, substrings the error line must
# contain, each given as alternatives any of which will do).
def case_missing_dir(args, case):
    path = os.path.join(args.work_dir, "no_such_model_dir")
    return path, [["no_such_model_dir"]]


def case_missing_config(args, case):
    path = copy_model(args, BASE, case)
    os.remove(os.path.join(path, "config.json"))
    return path, [["config.json"]]


def case_config_not_json(args, case):
    path = copy_model(args, BASE, case)
    write_bytes(os.path.join(path, "config.json"), b'{"architectures": ["LlamaForCausalLM"], ')
    return path, [["config.json"]]


def case_config_missing_key(args, case):
    path = copy_model(args, BASE, case)
    edit_config(path, lambda c: c.pop("hidden_size"))
    return path, [["config.json"], ["hidden_size"]]


def case_unknown_architecture(args, case):
    path = copy_model(args, BASE, case)
    edit_config(path, lambda c: c.update(architectures=["FooBarForCausalLM"], model_type="foobar"))
    return path, [["config.json"], ["FooBarForCausalLM", "architectures"]]


def case_empty_safetensors(args, case):
    path = copy_model(args, BASE, case)
    write_bytes(os.path.join(path, WEIGHTS), b"\x10\x00")
    return path, [[WEIGHTS]]


def case_truncated_safetensors(args, case):
    path = copy_model(args, BASE, case)
    f = os.path.join(path, WEIGHTS)
    with open(f, "rb") as fh:
        blob = fh.read()
    write_bytes(f, blob[:len(blob) // 2])
    return path, [[WEIGHTS]]


def case_header_len_beyond_file(args, case):
    path = copy_model(args, BASE, case)
    f = os.path.join(path, WEIGHTS)
    with open(f, "rb") as fh:
        blob = fh.read()
    write_bytes(f, struct.pack("<Q", len(blob) + 4096) + blob[8:])
    return path, [[WEIGHTS]]


def case_header_len_huge(args, case):
    # 2^63: an engine that allocates the header length before checking it would die here.
    path = copy_model(args, BASE, case)
    f = os.path.join(path, WEIGHTS)
    with open(f, "rb") as fh:
        blob = fh.read()
    write_bytes(f, struct.pack("<Q", 1 << 63) + blob[8:])
    return path, [[WEIGHTS]]


def case_bad_header_json(args, case):
    path = copy_model(args, BASE, case)
    f = os.path.join(path, WEIGHTS)
    with open(f, "rb") as fh:
        blob = bytearray(fh.read())
    (n,) = struct.unpack("<Q", blob[:8])
    blob[8 + n // 2:8 + n // 2 + 6] = b'}]{"\\x'  # same length, no longer JSON
    write_bytes(f, bytes(blob))
    return path, [[WEIGHTS]]


def case_offsets_out_of_file(args, case):
    path = copy_model(args, BASE, case)
    name = "model.layers.1.mlp.up_proj.weight"
    f = os.path.join(path, WEIGHTS)
    _, data = read_raw(f)

    def move(h):
        size = h[name]["data_offsets"][1] - h[name]["data_offsets"][0]
        h[name]["data_offsets"] = [len(data) + 64, len(data) + 64 + size]
    edit_header(f, move)
    return path, [[WEIGHTS], [name]]


def case_offsets_inconsistent(args, case):
    # The byte range is inside the file but shorter than shape x dtype says.
    path = copy_model(args, BASE, case)
    name = "model.layers.0.self_attn.v_proj.weight"

    def shrink(h):
        b, e = h[name]["data_offsets"]
        h[name]["data_offsets"] = [b, e - 2]
    edit_header(os.path.join(path, WEIGHTS), shrink)
    return path, [[WEIGHTS], [name]]


def case_wrong_shape(args, case):
    # Transposed: same byte count, so only a check against config.json can catch it.
    path = copy_model(args, BASE, case)
    name = "model.layers.0.self_attn.k_proj.weight"
    edit_header(os.path.join(path, WEIGHTS),
                lambda h: h[name].update(shape=list(reversed(h[name]["shape"]))))
    return path, [[name]]


def case_wrong_dtype(args, case):
    import safetensors_io
    path = copy_model(args, BASE, case)
    name = "model.layers.2.mlp.gate_proj.weight"
    f = os.path.join(path, WEIGHTS)
    tensors = safetensors_io.load_file(f, raw=True)
    dtypes = {k: "BF16" for k in tensors}
    tensors[name] = np.arange(tensors[name].size, dtype=np.int32).reshape(tensors[name].shape)
    dtypes[name] = "I32"
    safetensors_io.save_file(tensors, f, dtypes)
    return path, [[name]]


def case_missing_tensor(args, case):
    import safetensors_io
    path = copy_model(args, BASE, case)
    name = "model.layers.2.mlp.down_proj.weight"
    f = os.path.join(path, WEIGHTS)
    tensors = safetensors_io.load_file(f, raw=True)
    del tensors[name]
    safetensors_io.save_file(tensors, f, {k: "BF16" for k in tensors})
    return path, [[name]]


def case_missing_shard(args, case):
    path = copy_model(args, SHARDED, case)
    shard = "model-00002-of-00002.safetensors"
    os.remove(os.path.join(path, shard))
    return path, [[shard]]


def case_shard_missing_tensor(args, case):
    # The index still lists the tensor, but its shard no longer holds it.
    import safetensors_io
    path = copy_model(args, SHARDED, case)
    with open(os.path.join(path, "model.safetensors.index.json")) as f:
        weight_map = json.load(f)["weight_map"]
    name = "model.layers.1.mlp.gate_proj.weight"
    f = os.path.join(path, weight_map[name])
    tensors = safetensors_io.load_file(f)
    del tensors[name]
    safetensors_io.save_file(tensors, f)
    return path, [[name]]


def case_index_not_json(args, case):
    path = copy_model(args, SHARDED, case)
    write_bytes(os.path.join(path, "model.safetensors.index.json"), b'{"weight_map": {"x": ')
    return path, [["model.safetensors.index.json"]]


CASES = [
    case_missing_dir, case_missing_config, case_config_not_json, case_config_missing_key,
    case_unknown_architecture, case_empty_safetensors, case_truncated_safetensors,
    case_header_len_beyond_file, case_header_len_huge, case_bad_header_json,
    case_offsets_out_of_file, case_offsets_inconsistent, case_wrong_shape, case_wrong_dtype,
    case_missing_tensor, case_missing_shard, case_shard_missing_tensor, case_index_not_json,
]


def check_error(res, name, run, required):
    """Exit code > 0, stderr's last line 'error: ...' containing one of each group of names."""
    if run.timed_out or run.returncode is None:
        return res.check(name, False, run.describe())
    if run.returncode <= 0:
        why = "exit 0 on a broken input" if run.returncode == 0 else \
            f"killed by signal {-run.returncode} (crash)"
        return res.check(name, False, f"{why}; " + run.describe())
    line = run.last_stderr_line()
    if not line.startswith("error: ") or not line[len("error: "):].strip():
        return res.check(name, False, "stderr's last line is not 'error: <message>'; "
                         + run.describe())
    missing = [alts for alts in required if not any(a in line for a in alts)]
    if missing:
        want = "; ".join(" or ".join(repr(a) for a in alts) for alts in missing)
        return res.check(name, False, f"error line does not name {want}: {line!r}")
    return res.check(name, True, f"exit {run.returncode}: {line}")


def main():
    args = eu.parse_args(__doc__.splitlines()[0])
    res = eu.Results()
    eu.require_binary(args, res)
    out = os.path.join(args.work_dir, "out.npy")
    if os.path.exists(out):
        os.remove(out)
    for build in CASES:
        case = build.__name__[len("case_"):]
        path, required = build(args, case)
        run = eu.run_sampan(args, ["info", "--model", path])
        check_error(res, f"{case}.info", run, required)
        run = eu.run_sampan(args, ["logits", "--model", path, "--ids", "1,2,3", "--out", out])
        check_error(res, f"{case}.logits", run, required)

    # Bad --ids on a valid model. Out-of-range ids must be named in the message.
    good = os.path.join(eu.models_dir(args), BASE)
    with open(os.path.join(good, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    bad_ids = [
        ("id_equal_vocab", f"1,{vocab}", [[str(vocab)]]),
        ("id_far_out", "1,2,1000000", [["1000000"]]),
        ("id_negative", "1,-4", [["-4"]]),
        ("id_overflow", "1,99999999999999999999999", []),
        ("id_not_number", "1,abc,3", []),
        ("id_float", "1,2.5", []),
        ("id_empty_item", "1,,3", []),
        ("id_empty", "", []),
    ]
    for case, ids, required in bad_ids:
        run = eu.run_sampan(args, ["logits", "--model", good, "--ids", ids, "--out", out])
        check_error(res, f"{case}.logits", run, required)

    check_devices(args, res, good, out)
    res.finish()


def check_devices(args, res, good, out):
    """--device: a GPU that is not there is one clear line and a non-zero exit, before loading.

    cuda:99 fails on every machine. Plain cuda fails unless a GPU is visible (then the run must
    succeed: tests/cuda/test_cuda_e2e.cc checks what it computes)."""
    run = eu.run_sampan(args, ["logits", "--model", good, "--ids", "1,2,3", "--out", out,
                               "--device", "cuda:99"])
    check_error(res, "device_cuda99.logits", run, [["cuda:99 requested but"]])
    no_gpu = ["cuda:0 requested but no CUDA device is visible",
              "cuda:0 requested but Sampan was built without CUDA"]
    for cmd in (["logits", "--model", good, "--ids", "1,2,3", "--out", out],
                ["bench", "--model", good, "--prompt-len", "4", "--gen", "2", "--repeat", "1"]):
        name = f"device_cuda.{cmd[0]}"
        run = eu.run_sampan(args, cmd + ["--device", "cuda"])
        if run.returncode == 0:
            res.check(name, True, "a CUDA device is visible: the run succeeded")
            continue
        if check_error(res, name, run, [no_gpu]):
            lines = [ln for ln in run.stderr.split("\n") if ln.strip()]
            res.check(f"{name}.one_line", len(lines) == 1,
                      f"stderr has {len(lines)} lines, want 1; " + run.describe())
    run = eu.run_sampan(args, ["logits", "--model", good, "--ids", "1", "--out", out,
                               "--device", "tpu"])
    check_error(res, "device_unknown.logits", run, [["--device"]])


if __name__ == "__main__":
    main()
