"""End-to-end: `sampan infer` on the ONNX classic models against torch and onnxruntime.

The models, inputs and torch's outputs are committed in tests/data/classic (made once by
tests/reference/make_classic_models.py). For every model and case, `sampan infer` must write each
output as <name>.npy with torch's shape and agree with torch to cosine >= 0.99999 and max relative
error <= 1e-4 (max |sampan - torch| / max |torch|), and with onnxruntime, run live here on the
same file and inputs, to the same bounds. `sampan info` must list the real input and output names
and the pass report. Also checked: bare --input for a one-input model, --repeat printing a median,
input dtype conversion (i32 ids for an i64 input), and the output-name sanitising rule.
"""

import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402

COS_MIN = 0.99999
REL_MAX = 1e-4


def compare(res, name, got, want):
    if got.shape != want.shape:
        res.check(name, False, f"shape {got.shape}, expected {want.shape}")
        return
    g = got.astype(np.float64).ravel()
    w = want.astype(np.float64).ravel()
    cos = float(g @ w / max(np.linalg.norm(g) * np.linalg.norm(w), 1e-300))
    rel = float(np.max(np.abs(g - w)) / max(np.max(np.abs(w)), 1e-30))
    res.check(name, cos >= COS_MIN and rel <= REL_MAX and np.isfinite(g).all(),
              f"cosine {cos:.8f}, max relative error {rel:.2e}")


def main():
    args = eu.parse_args(__doc__.splitlines()[0])
    res = eu.Results()
    eu.require_binary(args, res)
    import onnxruntime as ort  # a CI peer: missing is a failure, not a skip

    data = os.path.join(args.source_dir, "tests", "data", "classic")
    with open(os.path.join(data, "manifest.json")) as f:
        manifest = json.load(f)
    models = [m for m in manifest if not m.startswith("_")]
    res.check("manifest lists the models", set(models) >= {"resnet_tiny", "resnet_tiny_bn", "cnn_ops", "bert_tiny"},
              ", ".join(models))
    for model in models:
        spec = manifest[model]
        path = os.path.join(data, model + ".onnx")
        info = eu.run_sampan(args, ["info", "--model", path])
        ok = info.returncode == 0 and all(
            re.search(rf"^(input|output):\s+{re.escape(n)} ", info.stdout, re.M)
            for n in spec["inputs"] + spec["outputs"]) and "fold_constants:" in info.stdout
        res.check(f"{model}.info", ok, info.describe() if not ok else "")
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        for k in spec["cases"]:
            inputs = {n: np.load(os.path.join(data, f"{model}.{k}.{n}.npy")) for n in spec["inputs"]}
            out_dir = os.path.join(args.work_dir, f"{model}.{k}")
            argv = ["infer", "--model", path, "--output-dir", out_dir, "--threads", "2"]
            for n in spec["inputs"]:
                argv += ["--input", f"{n}={os.path.join(data, f'{model}.{k}.{n}.npy')}"]
            run = eu.run_sampan(args, argv)
            if not res.check(f"{model}.{k}.infer runs", run.returncode == 0, run.describe() if run.returncode else ""):
                continue
            ort_out = dict(zip(spec["outputs"], sess.run(spec["outputs"], inputs)))
            for n in spec["outputs"]:
                got = np.load(os.path.join(out_dir, f"{n}.npy"))
                want = np.load(os.path.join(data, f"{model}.{k}.{n}.npy"))
                compare(res, f"{model}.{k}.{n} vs torch", got, want)
                compare(res, f"{model}.{k}.{n} vs onnxruntime", got, ort_out[n])

    # One-input model: bare --input, and --repeat prints the median latency.
    path = os.path.join(data, "resnet_tiny.onnx")
    img = os.path.join(data, "resnet_tiny.0.images.npy")
    out_dir = os.path.join(args.work_dir, "bare")
    run = eu.run_sampan(args, ["infer", "--model", path, "--input", img, "--output-dir", out_dir, "--repeat", "3"])
    res.check("bare --input and --repeat", run.returncode == 0 and re.search(r"median [0-9.]+ ms over 3 runs", run.stdout)
              and os.path.exists(os.path.join(out_dir, "logits.npy")), run.describe())

    # i32 ids for the i64 inputs are converted (numpy's default integer often differs).
    spec = manifest["bert_tiny"]
    argv = ["infer", "--model", os.path.join(data, "bert_tiny.onnx"), "--output-dir", os.path.join(args.work_dir, "i32")]
    for n in spec["inputs"]:
        p = os.path.join(args.work_dir, f"i32.{n}.npy")
        np.save(p, np.load(os.path.join(data, f"bert_tiny.1.{n}.npy")).astype(np.int32))
        argv += ["--input", f"{n}={p}"]
    run = eu.run_sampan(args, argv)
    if res.check("i32 inputs for i64 model inputs", run.returncode == 0, run.describe()):
        compare(res, "i32 inputs give the same output", np.load(os.path.join(args.work_dir, "i32", "pooler_output.npy")),
                np.load(os.path.join(data, "bert_tiny.1.pooler_output.npy")))

    # Output names with characters outside [A-Za-z0-9._-] become '_' (a model made here with
    # onnx's helper: Relu with output "out/relu:0").
    try:
        import onnx
        from onnx import TensorProto, helper
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["out/relu:0"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("out/relu:0", TensorProto.FLOAT, [2, 3])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        mp = os.path.join(args.work_dir, "names.onnx")
        onnx.save(m, mp)
        x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
        xp = os.path.join(args.work_dir, "names_x.npy")
        np.save(xp, x)
        od = os.path.join(args.work_dir, "names_out")
        run = eu.run_sampan(args, ["infer", "--model", mp, "--input", xp, "--output-dir", od])
        f = os.path.join(od, "out_relu_0.npy")
        res.check("output name sanitised", run.returncode == 0 and os.path.exists(f)
                  and np.array_equal(np.load(f), np.maximum(x, 0)), run.describe())
    except ImportError:
        res.check("onnx package for the name test", False, "pip install onnx")
    res.finish()


if __name__ == "__main__":
    main()
