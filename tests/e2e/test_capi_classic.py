"""End-to-end: classic models (ONNX) through the C API's predictor, its Python binding and the
C example (clients/c/classic_infer.c, built as sampan_c_classic_infer).

  - resnet_tiny and bert_tiny (tests/data/classic, every committed case) through the binding,
    Paddle style (handle -> reshape -> copy_from_cpu -> run -> copy_to_cpu) and through
    run({name: array}) / run([arrays]), against the committed torch outputs: cosine >= 0.99999
    and max relative error <= 1e-4; the model path as an .onnx file and as a directory holding
    one; declared shapes, dim names and dtypes; output shapes and dtypes after a run;
  - a clone run from a second thread while the original runs on the first (shared weights, own
    buffers): both agree with torch;
  - bool and uint8 inputs and outputs (a small model made here with the onnx package);
  - the C example on resnet_tiny (raw f32 input file): its printed shape and first values are
    torch's;
  - errors: an unset input, a wrong byte count, rank, fixed dim, dtype, an unknown input name,
    inputs disagreeing on a symbolic dim, an id out of range (Gather), a params file, a
    quantized precision: each the documented status and a one-line message naming the input or
    node; a failed run leaves no outputs and the next good run works;
  - a decoder predictor still declares input_ids [-1, -1] and logits [-1, -1, vocab].
Environment (set by CTest): SAMPAN_LIBRARY (libsampan.so), SAMPAN_C_EXAMPLE_DIR (its build dir).
"""

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import threading

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402

COS_MIN = 0.99999
REL_MAX = 1e-4


def compare(res, name, got, want):
    if got.shape != want.shape or got.dtype != want.dtype:
        return res.check(name, False, f"{got.dtype}{got.shape}, expected {want.dtype}{want.shape}")
    g = got.astype(np.float64).ravel()
    w = want.astype(np.float64).ravel()
    cos = float(g @ w / max(np.linalg.norm(g) * np.linalg.norm(w), 1e-300))
    rel = float(np.max(np.abs(g - w)) / max(np.max(np.abs(w)), 1e-30))
    return res.check(name, cos >= COS_MIN and rel <= REL_MAX and np.isfinite(g).all(),
                     f"cosine {cos:.8f}, max relative error {rel:.2e}")


class Case:
    def __init__(self, data, manifest, model, k):
        spec = manifest[model]
        self.name = f"{model}.{k}"
        self.inputs = {n: np.load(os.path.join(data, f"{model}.{k}.{n}.npy")) for n in spec["inputs"]}
        self.outputs = {n: np.load(os.path.join(data, f"{model}.{k}.{n}.npy")) for n in spec["outputs"]}


def fails(res, sampan, name, code, required, fn, *args):
    """fn(*args) must raise SampanError with status `code`, a one-line message containing every
    string of `required`."""
    try:
        fn(*args)
    except sampan.SampanError as e:
        ok = e.status == code and "\n" not in e.message and all(r in e.message for r in required)
        return res.check(name, ok, f"{e.name}: {e.message}")
    return res.check(name, False, "no error raised")


def check_models(res, sampan, data, manifest, work):
    S = sampan
    for model in ("resnet_tiny", "bert_tiny"):
        spec = manifest[model]
        path = os.path.join(data, model + ".onnx")
        cases = [Case(data, manifest, model, k) for k in spec["cases"]]
        with S.Predictor(S.Config(path, threads=2)) as p:
            res.check(f"{model}: input and output names", p.input_names == spec["inputs"] and
                      p.output_names == spec["outputs"], f"{p.input_names} -> {p.output_names}")
            decl = {n: p.get_input_handle(n) for n in p.input_names}
            info = {n: (t.declared_shape, t.model_dtype) for n, t in decl.items()}
            want_dtype = {n: a.dtype for n, a in cases[0].inputs.items()}
            res.check(f"{model}: declared inputs (symbolic batch, the model's dtype)",
                      all(isinstance(s[0], str) and len(s) == cases[0].inputs[n].ndim and
                          dt == want_dtype[n] for n, (s, dt) in info.items()), str(info))
            out_decl = {n: p.get_output_handle(n).model_dtype for n in p.output_names}
            res.check(f"{model}: declared output dtypes", all(
                dt == np.float32 for dt in out_decl.values()), str(out_decl))
            for c in cases:
                # Paddle style.
                for n, a in c.inputs.items():
                    t = p.get_input_handle(n)
                    t.reshape(a.shape)
                    t.copy_from_cpu(a)
                p.run()
                for n, want in c.outputs.items():
                    t = p.get_output_handle(n)
                    res.check(f"{c.name}.{n}: shape and dtype after run",
                              t.shape == want.shape and t.dtype == np.float32,
                              f"{t.dtype}{t.shape}")
                    compare(res, f"{c.name}.{n} vs torch (handles)", t.copy_to_cpu(), want)
                # Dict and list forms.
                got = p.run(c.inputs)
                for n, want in c.outputs.items():
                    compare(res, f"{c.name}.{n} vs torch (run dict)", got[n], want)
                got = p.run([c.inputs[n] for n in p.input_names])
                compare(res, f"{c.name} first output vs torch (run list)", got[0],
                        c.outputs[p.output_names[0]])
        if model == "resnet_tiny":
            # A directory holding one .onnx file; one array in (unbatched too).
            d = os.path.join(work, "resnet_dir")
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            shutil.copy(path, os.path.join(d, "model.onnx"))
            c = cases[0]
            with S.Predictor(S.Config(d, threads=2)) as p:
                compare(res, "resnet_tiny from a directory", p.run(c.inputs["images"]),
                        c.outputs["logits"])
                compare(res, "resnet_tiny unbatched image", p.run(c.inputs["images"][0]),
                        c.outputs["logits"][0])
    return True


def check_clone_threads(res, sampan, data, manifest):
    S = sampan
    path = os.path.join(data, "bert_tiny.onnx")
    c0, c1 = (Case(data, manifest, "bert_tiny", k) for k in (0, 1))
    p = S.Predictor(S.Config(path, threads=1))
    q = p.clone()
    results, errors = {}, []

    def worker():
        try:
            for i in range(5):
                results[f"clone.{i}"] = q.run(c1.inputs)
        except Exception as e:  # reported below
            errors.append(repr(e))

    th = threading.Thread(target=worker)
    th.start()
    for i in range(5):
        results[f"orig.{i}"] = p.run(c0.inputs)
    th.join()
    if not res.check("clone on a second thread runs", not errors, "; ".join(errors)):
        return
    worst = {}
    for key, out in results.items():
        case = c1 if key.startswith("clone") else c0
        for n, want in case.outputs.items():
            g, w = out[n].astype(np.float64), want.astype(np.float64)
            rel = float(np.abs(g - w).max() / np.abs(w).max()) if g.shape == w.shape else 1e9
            worst[key.split(".")[0]] = max(worst.get(key.split(".")[0], 0.0), rel)
    res.check("clone and original, concurrently, vs torch",
              max(worst.values()) <= REL_MAX and len(worst) == 2, str(worst))
    # The clone's inputs are its own: the original still holds case 0.
    compare(res, "original after the clone ran", p.run(c0.inputs)["pooler_output"],
            c0.outputs["pooler_output"])
    p.close()
    compare(res, "clone outlives the original", q.run(c1.inputs)["pooler_output"],
            c1.outputs["pooler_output"])
    q.close()


def make_bool_model(work):
    from onnx import TensorProto, helper
    n = "n"
    nodes = [
        helper.make_node("Not", ["mask"], ["not_mask"], name="not_1"),
        helper.make_node("Cast", ["x"], ["xf"], name="cast_1", to=TensorProto.FLOAT),
        helper.make_node("Where", ["mask", "y", "xf"], ["picked"], name="where_1"),
        helper.make_node("Identity", ["x"], ["x_out"], name="id_1"),
    ]
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("mask", TensorProto.BOOL, [n]),
         helper.make_tensor_value_info("x", TensorProto.UINT8, [n]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("not_mask", TensorProto.BOOL, [n]),
         helper.make_tensor_value_info("picked", TensorProto.FLOAT, [n]),
         helper.make_tensor_value_info("x_out", TensorProto.UINT8, [n])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = os.path.join(work, "bool_u8.onnx")
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return path


def check_bool_u8(res, sampan, work):
    S = sampan
    path = make_bool_model(work)
    mask = np.array([True, False, True, False, True])
    x = np.array([0, 7, 200, 255, 3], np.uint8)
    y = np.array([1.5, -2.0, 3.25, 4.0, -5.5], np.float32)
    with S.Predictor(S.Config(path, threads=1)) as p:
        dts = {n: p.get_input_handle(n).model_dtype for n in p.input_names}
        res.check("bool/u8 model: declared dtypes", dts == {
            "mask": np.dtype(bool), "x": np.dtype(np.uint8), "y": np.dtype(np.float32)}, str(dts))
        out = p.run({"mask": mask, "x": x, "y": y})
        ok = (out["not_mask"].dtype == np.bool_ and np.array_equal(out["not_mask"], ~mask) and
              out["x_out"].dtype == np.uint8 and np.array_equal(out["x_out"], x) and
              np.array_equal(out["picked"], np.where(mask, y, x.astype(np.float32))))
        res.check("bool/u8 model: outputs as numpy computes", ok,
                  {k: (v.dtype.name, v.tolist()) for k, v in out.items()})
        # bool and uint8 are interchangeable on the way in; any non-zero byte is true.
        out = p.run({"mask": np.array([0, 9, 1, 0, 255], np.uint8), "x": x.astype(bool), "y": y})
        ok = (np.array_equal(out["not_mask"], [True, False, False, True, False]) and
              np.array_equal(out["x_out"], x.astype(bool).astype(np.uint8)))
        res.check("bool/u8 model: u8 fed to a bool input and bool to a u8 input", ok,
                  {k: v.tolist() for k, v in out.items()})


def check_c_example(res, data, work):
    exe = os.path.join(os.environ.get("SAMPAN_C_EXAMPLE_DIR", ""), "sampan_c_classic_infer")
    if not res.check("c classic example built", os.path.isfile(exe), exe):
        return
    path = os.path.join(data, "resnet_tiny.onnx")
    for k in (0, 1):
        images = np.load(os.path.join(data, f"resnet_tiny.{k}.images.npy"))
        want = np.load(os.path.join(data, f"resnet_tiny.{k}.logits.npy"))
        raw = os.path.join(work, f"images.{k}.bin")
        np.ascontiguousarray(images, np.float32).tofile(raw)
        dims = "x".join(map(str, images.shape))
        argv = [exe, path, "--input", f"images={dims}:{raw}", "--threads", "2", "--print", "16"]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=eu.RUN_TIMEOUT_S,
                               env=dict(os.environ, SAMPAN_LOG_LEVEL="warn"))
        except subprocess.TimeoutExpired:
            res.check(f"c example case {k} runs", False, "timed out")
            continue
        if not res.check(f"c example case {k} runs", p.returncode == 0,
                         f"exit {p.returncode}: {p.stderr.strip()[-500:]}"):
            continue
        out = p.stdout
        listed = (re.search(r"^input\[0\]: images f32 \[\w+, 3, \w+, \w+\]$", out, re.M) and
                  re.search(r"^output\[0\]: logits f32 \[", out, re.M))
        res.check(f"c example case {k}: lists the declared input and output", bool(listed), out[:300])
        m = re.search(r"^result\[0\]: logits f32((?: \d+)*)$", out, re.M)
        shape = tuple(int(d) for d in m.group(1).split()) if m else None
        res.check(f"c example case {k}: output shape", shape == want.shape, f"{shape} vs {want.shape}")
        m = re.search(r"^values\[0\]:(.*)$", out, re.M)
        vals = np.array([float(v) for v in m.group(1).split()]) if m else np.zeros(0)
        ref = want.ravel()[:16].astype(np.float64)
        rel = (float(np.abs(vals - ref).max() / np.abs(want).max())
               if vals.shape == ref.shape else float("inf"))
        res.check(f"c example case {k}: first values are torch's", rel <= REL_MAX,
                  f"max relative error {rel:.2e} over {vals.size} values")
    # Without a file: every element is --fill; with no --input for a symbolic input, an error.
    p = subprocess.run([exe, path, "--input", "images=2x3x16x16", "--fill", "0.5"],
                       capture_output=True, text=True, timeout=eu.RUN_TIMEOUT_S)
    res.check("c example: filled input runs", p.returncode == 0 and
              re.search(r"^result\[0\]: logits f32 2 10$", p.stdout, re.M) is not None,
              p.stdout[-300:] + p.stderr[-300:])
    p = subprocess.run([exe, path, "--input", "images=1x4x16x16"], capture_output=True, text=True,
                       timeout=eu.RUN_TIMEOUT_S)
    res.check("c example: a wrong shape fails with the library's message naming the input",
              p.returncode == 1 and "SAMPAN_ERROR_INVALID_ARGUMENT" in p.stderr and
              "'images'" in p.stderr, p.stderr.strip())


def check_errors(res, sampan, data, manifest, args):
    S = sampan
    bert = os.path.join(data, "bert_tiny.onnx")
    c = Case(data, manifest, "bert_tiny", 0)
    ids, mask, types = (c.inputs[n] for n in ("input_ids", "attention_mask", "token_type_ids"))
    p = S.Predictor(S.Config(bert, threads=1))

    def feed(**arrays):
        for n, a in arrays.items():
            t = p.get_input_handle(n)
            t.reshape(a.shape)
            t.copy_from_cpu(a)

    fails(res, S, "run before any input", S.INVALID_ARGUMENT, ["input_ids", "no data"], p.run)
    feed(input_ids=ids, attention_mask=mask)
    fails(res, S, "unset input", S.INVALID_ARGUMENT, ["token_type_ids", "no data"], p.run)
    out = p.get_output_handle("last_hidden_state")
    res.check("no outputs after a failed run", out.shape == () and out.dtype is None,
              f"{out.dtype}{out.shape}")
    fails(res, S, "copy_to_cpu after a failed run", S.INVALID_ARGUMENT, ["last_hidden_state"],
          out.copy_to_cpu)
    fails(res, S, "unknown input name", S.NOT_FOUND, ["'tokens'", "input_ids"],
          p.get_input_handle, "tokens")
    fails(res, S, "unknown output name", S.NOT_FOUND, ["'hidden'"], p.get_output_handle, "hidden")
    t = p.get_input_handle("input_ids")
    t.reshape((1, 16))
    buf = np.ones(32, np.int64)
    st = S.lib.sampan_tensor_copy_from_cpu(t.handle, S._capi.DTYPE_I64,
                                           buf.ctypes.data_as(ctypes.c_void_p), 16 * 8 - 8)
    msg = S.lib.sampan_last_error().decode()
    res.check("wrong byte count", st == S.INVALID_ARGUMENT and "input_ids" in msg and "120" in msg
              and "128" in msg, f"{S.lib.sampan_status_name(st).decode()}: {msg}")
    fails(res, S, "wrong dtype (f32 ids)", S.INVALID_ARGUMENT, ["input_ids", "i64", "f32"],
          t.copy_from_cpu, np.ones((1, 16), np.float32))
    fails(res, S, "wrong dtype (bool ids)", S.INVALID_ARGUMENT, ["input_ids", "bool"],
          t.copy_from_cpu, np.ones((1, 16), bool))
    feed(input_ids=ids[..., None], attention_mask=mask, token_type_ids=types)
    fails(res, S, "wrong rank", S.INVALID_ARGUMENT, ["input_ids", "[1, 16, 1]", "rank"], p.run)
    feed(input_ids=np.ones((1, 17), np.int64))
    fails(res, S, "inputs disagree on a symbolic dim", S.INVALID_ARGUMENT,
          ["'attention_mask'", "'input_ids'", "17", "16"], p.run)
    feed(input_ids=np.full((1, 16), 100000, np.int64))
    fails(res, S, "id out of range (Gather)", S.INVALID_ARGUMENT, ["node '", "100000"], p.run)
    feed(input_ids=np.full((1, 16), 2**40, np.int64))
    fails(res, S, "id beyond int32 (Gather)", S.INVALID_ARGUMENT, ["node '"], p.run)
    feed(input_ids=np.zeros((0, 16), np.int64), attention_mask=np.zeros((0, 16), np.int64),
         token_type_ids=np.zeros((0, 16), np.int64))
    fails(res, S, "batch 0", S.INVALID_ARGUMENT, ["input_ids", ">= 1"], p.run)
    # i32 ids feed an i64 input; then a good run after all that.
    feed(input_ids=ids.astype(np.int32), attention_mask=mask, token_type_ids=types)
    p.run()
    compare(res, "a good run after the errors (i32 ids)",
            p.get_output_handle("pooler_output").copy_to_cpu(), c.outputs["pooler_output"])
    p.close()

    resnet = os.path.join(data, "resnet_tiny.onnx")
    with S.Predictor(S.Config(resnet, threads=1)) as r:
        fails(res, S, "wrong fixed dim", S.INVALID_ARGUMENT, ["'images'", "dim 1", "3"], r.run,
              np.zeros((1, 4, 16, 16), np.float32))
        fails(res, S, "int64 images", S.INVALID_ARGUMENT, ["'images'", "f32", "i64"], r.run,
              np.zeros((1, 3, 16, 16), np.int64))
    fails(res, S, "params file (not a format yet)", S.UNSUPPORTED, ["params"], S.Predictor,
          S.Config(resnet, params_file=resnet))
    fails(res, S, "missing params file", S.NOT_FOUND, ["/nonexistent.pdiparams"], S.Predictor,
          S.Config(resnet, params_file="/nonexistent.pdiparams"))
    cfg = S.Config(resnet, params_file="x.pdiparams")
    res.check("config keeps the params file", cfg.get("params_file") == "x.pdiparams",
              cfg.get("params_file"))
    fails(res, S, "int4 precision on a classic model", S.UNSUPPORTED, ["int4"], S.Predictor,
          S.Config(resnet, precision="int4"))
    fails(res, S, "missing .onnx file", S.NOT_FOUND, ["nope.onnx"], S.Predictor,
          S.Config(os.path.join(args.work_dir, "nope.onnx")))


def check_decoder_declared(res, sampan, args):
    S = sampan
    with S.Predictor(S.Config(os.path.join(eu.models_dir(args), "tiny_llama3"), threads=1)) as p:
        i, o = p.get_input_handle("input_ids"), p.get_output_handle("logits")
        ok = (i.model_shape == (-1, -1) and i.dim_names == ("batch", "seq") and
              i.model_dtype == np.int64 and len(o.model_shape) == 3 and
              o.model_shape[:2] == (-1, -1) and o.model_shape[2] > 0 and
              o.model_dtype == np.float32)
        res.check("decoder: declared input_ids and logits", ok,
                  f"{i.declared_shape} {i.model_dtype} -> {o.declared_shape} {o.model_dtype}")


def main():
    args = eu.parse_args(__doc__.splitlines()[0])
    os.environ.setdefault("SAMPAN_LOG_LEVEL", "warn")
    lib = os.environ.get("SAMPAN_LIBRARY") or os.path.join(os.path.dirname(args.sampan),
                                                           "libsampan.so")
    os.environ["SAMPAN_LIBRARY"] = lib
    eu.sanitizer_preload(lib)
    sys.path.insert(0, os.path.join(args.source_dir, "clients", "python"))
    res = eu.Results()
    if not res.check("libsampan present", os.path.isfile(lib), lib):
        res.finish()
    import sampan
    res.check("binding loads", sampan.version() == "0.1.0", sampan.version())
    data = os.path.join(args.source_dir, "tests", "data", "classic")
    with open(os.path.join(data, "manifest.json")) as f:
        manifest = json.load(f)
    work = args.work_dir
    check_models(res, sampan, data, manifest, work)
    check_clone_threads(res, sampan, data, manifest)
    check_bool_u8(res, sampan, work)
    check_c_example(res, data, work)
    check_errors(res, sampan, data, manifest, args)
    check_decoder_declared(res, sampan, args)
    res.finish()


if __name__ == "__main__":
    main()
