"""End-to-end: single ONNX ops in the forms exporters write, built here with the onnx package's
helper, run by `sampan infer` and by onnxruntime (live) on the same file and inputs.

Covers the op forms the committed models do not reach: Split into equal parts (opset 13 without
sizes; opset 18 with num_outputs, the last part shorter), and the one-line refusal of a split
whose equal parts cannot divide the axis; Conv, MaxPool and AveragePool with auto_pad SAME_UPPER
and SAME_LOWER (even kernels, where the two differ), VALID, and the one-line refusal of
SAME with a stride > 1; Mod with fmod 0 and 1 on integers and floats; ConvTranspose (strides,
pads, output_padding, groups, dilations, bias) and the refusal of its output_shape form; a
residual block of 3x3 convs wide enough for the Winograd path (conv2d_winograd).
"""

import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402


def main():
    args = eu.parse_args(__doc__.splitlines()[0])
    res = eu.Results()
    eu.require_binary(args, res)
    import onnx  # CI dependencies: missing is a failure
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    work = args.work_dir
    rng = np.random.default_rng(11)

    def model(name, nodes, inputs, outputs, opset):
        g = helper.make_graph(nodes, "g", inputs, outputs)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        p = os.path.join(work, name + ".onnx")
        with open(p, "wb") as f:
            f.write(m.SerializeToString())
        return p

    def compare(name, path, feeds, out_names, tol=None):
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        want = sess.run(None, feeds)
        argv = ["infer", "--model", path, "--output-dir", os.path.join(work, name + "_out")]
        for k, v in feeds.items():
            p = os.path.join(work, f"{name}.{k}.npy")
            np.save(p, v)
            argv += ["--input", f"{k}={p}"]
        run = eu.run_sampan(args, argv)
        if run.returncode != 0:
            res.check(name, False, run.describe())
            return
        for o, w in zip(out_names, want):
            got = np.load(os.path.join(work, name + "_out", o + ".npy"))
            if tol is None:
                res.check(f"{name}: {o} {list(got.shape)} == onnxruntime {list(w.shape)}",
                          got.shape == w.shape and np.array_equal(got, w),
                          f"shape {got.shape} vs {w.shape}")
                continue
            err = float(np.max(np.abs(got - w)) / max(1e-30, float(np.max(np.abs(w))))) \
                if got.shape == w.shape else float("inf")
            res.check(f"{name}: {o} {list(got.shape)} ~ onnxruntime {list(w.shape)}", err <= tol,
                      f"shape {got.shape} vs {w.shape}, max error {err:.3g} of max |y| (<= {tol})")

    def tensor(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    # Split without sizes, opset 13: as many equal parts as outputs (they must divide the axis).
    outs = ["a", "b", "c"]
    p = model("split13", [helper.make_node("Split", ["x"], outs, axis=1)],
              [tensor("x", ["n", 6, 4])], [tensor(o, None) for o in outs], 13)
    compare("split13", p, {"x": rng.standard_normal((2, 6, 4)).astype(np.float32)}, outs)

    # Split with num_outputs, opset 18: ceil(7 / 3) = 3, so 3, 3 and 1 along the last axis.
    p = model("split18", [helper.make_node("Split", ["x"], outs, axis=-1, num_outputs=3)],
              [tensor("x", [2, "m"])], [tensor(o, None) for o in outs], 18)
    compare("split18", p, {"x": rng.standard_normal((2, 7)).astype(np.float32)}, outs)

    # Opset 13 equal parts of an axis they do not divide: one line naming the node.
    p = model("split13_bad", [helper.make_node("Split", ["x"], outs, axis=1, name="cut3")],
              [tensor("x", ["n", "k"])], [tensor(o, None) for o in outs], 13)
    xbad = os.path.join(work, "xbad.npy")
    np.save(xbad, np.ones((2, 7), np.float32))
    run = eu.run_sampan(args, ["infer", "--model", p, "--input", xbad, "--output-dir", os.path.join(work, "bad_out")])
    last = run.last_stderr_line()
    res.check("split13 of 7 into 3 equal parts: one error line naming the node",
              run.returncode is not None and run.returncode > 0 and last.startswith("error: ")
              and "cut3" in last and "divide" in last, run.describe())
    # auto_pad SAME (stride 1: explicit pads at import), against onnxruntime.
    x = rng.standard_normal((2, 3, 9, 10)).astype(np.float32)
    w4 = rng.standard_normal((5, 3, 4, 4)).astype(np.float32)
    for mode, extra in (("SAME_UPPER", {}), ("SAME_LOWER", {}),
                        ("VALID", {})):
        name = f"conv_{mode.lower()}"
        wt = helper.make_tensor("w", TensorProto.FLOAT, w4.shape, w4.ravel())
        g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], auto_pad=mode, **extra)],
                              "g", [tensor("x", ["n", 3, "h", "w"])], [tensor("y", None)], [wt])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        path = os.path.join(work, name + ".onnx")
        with open(path, "wb") as f:
            f.write(m.SerializeToString())
        compare(name, path, {"x": x}, ["y"], tol=1e-5)
    for op, mode, k in (("MaxPool", "SAME_UPPER", [2, 2]), ("AveragePool", "SAME_LOWER", [2, 3]),
                        ("AveragePool", "SAME_UPPER", [4, 3])):
        name = f"{op.lower()}_{mode.lower()}_{k[0]}x{k[1]}"
        p = model(name, [helper.make_node(op, ["x"], ["y"], auto_pad=mode, kernel_shape=k)],
                  [tensor("x", ["n", 3, "h", "w"])], [tensor("y", None)], 13)
        compare(name, p, {"x": x}, ["y"], tol=1e-6)

    # Mod: fmod = 0 (integers, the divisor's sign) and fmod = 1 (floats and integers, the
    # dividend's sign), mixed signs, broadcast divisor.
    ai = rng.integers(-50, 50, (3, 8)).astype(np.int64)
    bi = rng.choice([-7, -3, -1, 2, 5], (1, 8)).astype(np.int64)
    af = rng.standard_normal((3, 8)).astype(np.float32) * 10
    bf = rng.choice([-2.5, -1.0, 0.75, 3.0], (1, 8)).astype(np.float32)
    for name, fmod, a_, b_, elem in (("mod_int", 0, ai, bi, TensorProto.INT64),
                                     ("fmod_int", 1, ai, bi, TensorProto.INT64),
                                     ("fmod_float", 1, af, bf, TensorProto.FLOAT)):
        p = model(name, [helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)],
                  [helper.make_tensor_value_info("a", elem, ["n", 8]),
                   helper.make_tensor_value_info("b", elem, [1, 8])],
                  [helper.make_tensor_value_info("y", elem, None)], 13)
        compare(name, p, {"a": a_, "b": b_}, ["y"])

    # ConvTranspose: strides, pads, output_padding, groups, dilations, bias; then output_shape
    # (refused, one line naming the node).
    xt = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    for name, wshape, attrs, with_bias in (
            ("convT_s2_p1_op1", (4, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                               "output_padding": [1, 1]}, True),
            ("convT_g2_d2", (4, 2, 3, 2), {"group": 2, "dilations": [2, 1],
                                           "pads": [0, 1, 2, 0]}, False),
            ("convT_s3x1_k4", (4, 5, 4, 4), {"strides": [3, 1]}, True)):
        wv = rng.standard_normal(wshape).astype(np.float32)
        inits = [helper.make_tensor("w", TensorProto.FLOAT, wv.shape, wv.ravel())]
        ins = ["x", "w"]
        if with_bias:
            o = wshape[1] * attrs.get("group", 1)
            bv = rng.standard_normal((o,)).astype(np.float32)
            inits.append(helper.make_tensor("b", TensorProto.FLOAT, bv.shape, bv.ravel()))
            ins.append("b")
        g = helper.make_graph([helper.make_node("ConvTranspose", ins, ["y"], **attrs)], "g",
                              [tensor("x", ["n", 4, "h", "w"])], [tensor("y", None)], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        path = os.path.join(work, name + ".onnx")
        with open(path, "wb") as f:
            f.write(m.SerializeToString())
        compare(name, path, {"x": xt}, ["y"], tol=1e-5)
    wv = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    g = helper.make_graph([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up",
                                            strides=[2, 2], output_shape=[10, 12])], "g",
                          [tensor("x", ["n", 4, "h", "w"])], [tensor("y", None)],
                          [helper.make_tensor("w", TensorProto.FLOAT, wv.shape, wv.ravel())])
    path = os.path.join(work, "convT_output_shape.onnx")
    with open(path, "wb") as f:
        f.write(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    xin_t = os.path.join(work, "x_convT.npy")
    np.save(xin_t, xt)
    run = eu.run_sampan(args, ["infer", "--model", path, "--input", xin_t, "--output-dir",
                               os.path.join(work, "convT_out")])
    last = run.last_stderr_line()
    res.check("ConvTranspose with output_shape: one error line naming the node",
              run.returncode is not None and run.returncode > 0 and last.startswith("error: ")
              and "'up'" in last and "output_shape" in last, run.describe())

    # SAME with a stride > 1: the pads depend on the input size; one line naming the node.
    p = model("pool_same_stride2", [helper.make_node("MaxPool", ["x"], ["y"], auto_pad="SAME_UPPER",
                                                     kernel_shape=[3, 3], strides=[2, 2],
                                                     name="down2")],
              [tensor("x", ["n", 3, "h", "w"])], [tensor("y", None)], 13)
    xin = os.path.join(work, "x_same.npy")
    np.save(xin, x)
    run = eu.run_sampan(args, ["infer", "--model", p, "--input", xin, "--output-dir",
                               os.path.join(work, "same_out")])
    last = run.last_stderr_line()
    res.check("auto_pad SAME with stride 2: one error line naming the node",
              run.returncode is not None and run.returncode > 0 and last.startswith("error: ")
              and "down2" in last and "auto_pad SAME_UPPER" in last, run.describe())

    # A residual block of 3x3 stride-1 convs wide enough for the Winograd path (>= 16 channels):
    # pads 1 with a ReLU, a residual add, then valid pads and an output width that is no multiple
    # of the 4x4 output tile. `sampan info` must show the convs on conv2d_winograd, and the result
    # must match onnxruntime to the classic models' bound. The last conv's 16 output channels are
    # a whole block at both block sizes (8 on AVX2, 16 on AVX-512; 24 would pad to 32 at block 16,
    # more than the layout pass accepts, and stay NCHW).
    c = 32
    ws = [(rng.standard_normal((o, c, 3, 3)) * (2.0 / (9 * c)) ** 0.5).astype(np.float32) for o in (c, c, 16)]
    inits = [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(ws)]
    inits += [numpy_helper.from_array(rng.standard_normal(o).astype(np.float32) * 0.1, f"b{i}")
              for i, o in enumerate((c, c, 16))]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1], name="conv0"),
             helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
             helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Add", ["c1", "x"], ["s1"], name="residual"),
             helper.make_node("Relu", ["s1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "g", [tensor("x", ["n", c, "h", "w"])], [tensor("y", None)], inits)
    p = os.path.join(work, "winograd_block.onnx")
    with open(p, "wb") as f:
        f.write(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    info = eu.run_sampan(args, ["info", "--model", p])
    res.check("3x3 convs of 32 channels run as conv2d_winograd (sampan info)",
              info.returncode == 0 and re.search(r"ops after:.*conv2d_winograd 3", info.stdout) is not None,
              info.describe())
    compare("winograd_block", p, {"x": rng.standard_normal((2, c, 13, 11)).astype(np.float32)}, ["y"],
            tol=1e-4)
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
