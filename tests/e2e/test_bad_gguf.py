"""Bad GGUF model files: every one is refused by `sampan logits` (and `sampan info`) with one
"error:" line naming the file and the tensor or key, a non-zero exit, never a crash (this test
also runs against the sanitizer build).

The files are a small valid model (tests/reference/gguf_models.py, written with the `gguf`
package) edited one way each: metadata missing, of the wrong type or out of range, tensors
missing, of the wrong shape or of a type Sampan does not run, an unknown architecture, RoPE the
graph cannot do, a truncated file, split sets with a shard missing or mislabelled. The tensor
table's own structure (counts, offsets, alignment, dimensions) is covered byte by byte by
tests/unit/test_gguf.cc and the fuzz target tests/fuzz/fuzz_gguf.cc.
"""
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as U  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))


def main():
    args = U.parse_args(__doc__)
    res = U.Results()
    U.require_binary(args, res)
    try:
        import gguf
        import gguf_models as G
    except ImportError as e:
        res.check("reference package gguf", False, str(e))
        res.finish()
    os.makedirs(args.work_dir, exist_ok=True)
    src_dir = os.path.join(args.work_dir, "hf")
    G.make_llama_dir(src_dir, arch="llama", hidden=64, ffn=128, heads=4, kv_heads=2, vocab=300,
                     layers=2, llama3_rope=True)
    good = G.hf_to_gguf(src_dir, os.path.join(args.work_dir, "good.gguf"), "f32")

    def expect(name, path, *needles, command="logits"):
        argv = ["logits", "--model", path, "--ids", "1,2,3", "--out",
                os.path.join(args.work_dir, "out.npy")] if command == "logits" else ["info", "--model", path]
        r = U.run_sampan(args, argv)
        lines = [l for l in r.stderr.strip().split("\n") if l.startswith("error:")]
        ok = (r.returncode is not None and r.returncode > 0 and len(lines) == 1 and
              all(n in lines[0] for n in needles))
        res.check(f"{name} ({command})", ok, lines[0] if ok else r.describe())

    r = U.run_sampan(args, ["logits", "--model", good, "--ids", "1,2,3", "--out",
                            os.path.join(args.work_dir, "good.npy")])
    res.check("the unedited file runs", r.returncode == 0, "" if r.returncode == 0 else r.describe())

    src = gguf.GGUFReader(good)

    def rewrite(name, arch="llama", drop_keys=(), set_keys=None, drop=(), replace=None, extra=None):
        """A copy of good.gguf with metadata and tensors edited; returns its path."""
        path = os.path.join(args.work_dir, f"{name}.gguf")
        set_keys = set_keys or {}
        replace = replace or {}
        w = gguf.GGUFWriter(path, arch)
        for field in src.fields.values():
            key = field.name
            if key.startswith("GGUF.") or key == "general.architecture" or key in drop_keys:
                continue
            key = key.replace("llama.", arch + ".", 1)
            if key in set_keys:
                continue
            vtype = field.types[0]
            if vtype == gguf.GGUFValueType.ARRAY:
                w.add_array(key, field.contents())
            else:
                w.add_key_value(key, field.contents(), vtype)
        for key, (value, vtype) in set_keys.items():
            w.add_key_value(key, value, vtype)
        for t in src.tensors:
            if t.name in drop:
                continue
            if t.name in replace:
                w.add_tensor(t.name, replace[t.name])
                continue
            shape = [int(x) for x in reversed(t.shape.tolist())]
            w.add_tensor(t.name, np.array(t.data).reshape(shape))
        for tname, (data, raw_dtype) in (extra or {}).items():
            w.add_tensor(tname, data, raw_dtype=raw_dtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path

    V = gguf.GGUFValueType
    f32 = np.float32
    expect("missing tensor", rewrite("missing", drop=["blk.1.ffn_down.weight"]),
           "missing.gguf", "blk.1.ffn_down.weight", "missing")
    expect("missing tensor", os.path.join(args.work_dir, "missing.gguf"),
           "missing.gguf", "blk.1.ffn_down.weight", command="info")
    expect("missing embedding", rewrite("noembd", drop=["token_embd.weight"]),
           "noembd.gguf", "token_embd.weight")
    expect("tensor of the wrong shape",
           rewrite("shape", replace={"blk.0.attn_q.weight": np.zeros((64, 32), f32)}),
           "shape.gguf", "blk.0.attn_q.weight", "expected [64, 64]")
    expect("norm of the wrong length",
           rewrite("norm", replace={"blk.0.attn_norm.weight": np.ones(63, f32)}),
           "norm.gguf", "blk.0.attn_norm.weight", "expected [64]")
    expect("rope factors of the wrong length",
           rewrite("ropef", replace={"rope_freqs.weight": np.ones(5, f32)}),
           "ropef.gguf", "rope_freqs.weight")
    expect("non-positive rope factor",
           rewrite("ropez", replace={"rope_freqs.weight": np.zeros(8, f32)}),
           "ropez.gguf", "rope_freqs.weight", "positive")
    expect("tensor type Sampan does not run",
           rewrite("iq2", drop=["blk.0.ffn_up.weight"],
                   extra={"blk.0.ffn_up.weight": (np.zeros((128, 66), np.uint8),
                                                  gguf.GGMLQuantizationType.IQ2_XXS)}),
           "iq2.gguf", "blk.0.ffn_up.weight", "IQ2_XXS")
    expect("missing metadata", rewrite("nokey", drop_keys=["llama.embedding_length"]),
           "nokey.gguf", "llama.embedding_length", "missing")
    expect("metadata of the wrong type",
           rewrite("wrongtype", set_keys={"llama.embedding_length": ("sixty-four", V.STRING)}),
           "wrongtype.gguf", "llama.embedding_length", "expected an integer")
    expect("float metadata of the wrong type",
           rewrite("epsstr", set_keys={"llama.attention.layer_norm_rms_epsilon": ("tiny", V.STRING)}),
           "epsstr.gguf", "llama.attention.layer_norm_rms_epsilon", "expected a float")
    expect("zero heads", rewrite("zeroheads", set_keys={"llama.attention.head_count": (0, V.UINT32)}),
           "zeroheads.gguf", "llama.attention.head_count")
    expect("kv heads not dividing heads",
           rewrite("kvheads", set_keys={"llama.attention.head_count_kv": (3, V.UINT32)}),
           "kvheads.gguf", "llama.attention.head_count_kv")
    expect("partial rotary", rewrite("partial", set_keys={"llama.rope.dimension_count": (8, V.UINT32)}),
           "partial.gguf", "llama.rope.dimension_count", "not supported")
    expect("yarn RoPE", rewrite("yarn", set_keys={"llama.rope.scaling.type": ("yarn", V.STRING)}),
           "yarn.gguf", "llama.rope.scaling.type", "yarn")
    expect("bad norm epsilon",
           rewrite("eps", set_keys={"llama.attention.layer_norm_rms_epsilon": (-1.0, V.FLOAT32)}),
           "eps.gguf", "layer_norm_rms_epsilon")
    expect("unknown architecture", rewrite("arch", arch="phi3"), "arch.gguf", "phi3")
    # A truncated file: the tensor table promises data past the end.
    data = open(good, "rb").read()
    cut = os.path.join(args.work_dir, "cut.gguf")
    open(cut, "wb").write(data[:len(data) - 1000])
    expect("truncated file", cut, "cut.gguf", "runs past the end")
    expect("truncated file", cut, "cut.gguf", "runs past the end", command="info")
    # Not a GGUF file at all.
    junk = os.path.join(args.work_dir, "junk.gguf")
    open(junk, "wb").write(b"this is not a model\n" * 10)
    expect("not a GGUF file", junk, "junk.gguf", "magic")

    # Split sets: a missing shard, a shard that says it is another one.
    split_dir = os.path.join(args.work_dir, "split")
    shutil.rmtree(split_dir, ignore_errors=True)
    os.makedirs(split_dir)
    G.hf_to_gguf(src_dir, os.path.join(split_dir, "m.gguf"), "f32", split_max_tensors=8)
    shards = sorted(os.listdir(split_dir))
    res.check("split set written", len(shards) >= 3, str(shards))
    first = os.path.join(split_dir, shards[0])
    r = U.run_sampan(args, ["logits", "--model", first, "--ids", "1,2,3", "--out",
                            os.path.join(args.work_dir, "split.npy")])
    res.check("the unedited split set runs", r.returncode == 0, "" if r.returncode == 0 else r.describe())
    os.rename(os.path.join(split_dir, shards[1]), os.path.join(split_dir, "moved"))
    expect("split set with a shard missing", first, shards[0], "shard 2 of", "missing")
    os.rename(os.path.join(split_dir, "moved"), os.path.join(split_dir, shards[1]))
    shutil.copy(os.path.join(split_dir, shards[2]), os.path.join(split_dir, shards[1]))
    expect("split set with a mislabelled shard", first, shards[1], "split.no")
    res.finish()


if __name__ == "__main__":
    main()
