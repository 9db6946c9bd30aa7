"""End-to-end: broken ONNX files and bad `sampan infer` inputs fail cleanly, never crash.

Each case is a file made here (with the onnx package's helper, or by cutting bytes out of a
committed model). `sampan info` / `sampan infer` must exit with a code > 0 (a negative code is a
signal: a crash), and stderr's last line must be one "error: ..." line naming the file and the
node, initializer or input concerned. Runs in the Sanitize build too (label sanitize).
"""

import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402


def check_error(res, name, run, required):
    last = run.last_stderr_line()
    ok = (run.returncode is not None and run.returncode > 0 and last.startswith("error: ")
          and all(r in last for r in required))
    res.check(name, ok, last if ok else run.describe())


def main():
    args = eu.parse_args(__doc__.splitlines()[0])
    res = eu.Results()
    eu.require_binary(args, res)
    import onnx  # a CI dependency: missing is a failure
    from onnx import TensorProto, helper, numpy_helper

    data = os.path.join(args.source_dir, "tests", "data", "classic")
    work = args.work_dir
    x = os.path.join(work, "x.npy")
    np.save(x, np.ones((2, 3), np.float32))

    def model(nodes, inputs, outputs, inits=(), opset=17, name="m"):
        g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        p = os.path.join(work, name + ".onnx")
        with open(p, "wb") as f:
            f.write(m.SerializeToString())
        return p

    fx = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    fy = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)

    def infer(path, extra=()):
        return eu.run_sampan(args, ["infer", "--model", path, "--input", x, "--output-dir",
                                    os.path.join(work, "out")] + list(extra))

    # --- structural faults, found at load (info) ---
    good = os.path.join(data, "resnet_tiny.onnx")
    blob = open(good, "rb").read()
    cases = []
    p = os.path.join(work, "truncated.onnx")
    open(p, "wb").write(blob[: len(blob) // 2])
    cases.append(("truncated", p, ["truncated.onnx", "not an ONNX model"]))
    p = os.path.join(work, "text.onnx")
    open(p, "wb").write(b"this is not a protobuf at all\n" * 10)
    cases.append(("not_protobuf", p, ["text.onnx"]))
    p = os.path.join(work, "empty.onnx")
    open(p, "wb").write(b"")
    cases.append(("empty", p, ["empty.onnx"]))
    cases.append(("missing_file", os.path.join(work, "nope.onnx"), ["nope.onnx"]))
    cases.append(("unknown_op", model([helper.make_node("LpPool", ["x"], ["y"], name="lppool_1", kernel_shape=[2, 2])],
                                      [fx], [fy], [numpy_helper.from_array(np.ones((3, 3, 1, 1), np.float32), "w")],
                                      name="unknown_op"),
                  ["unknown_op.onnx", "node 'lppool_1'", "op 'LpPool' is not supported"]))
    cases.append(("cycle", model([helper.make_node("Relu", ["b"], ["a"], name="A"),
                                  helper.make_node("Add", ["x", "a"], ["b"], name="B"),
                                  helper.make_node("Relu", ["b"], ["y"], name="C")], [fx], [fy], name="cycle"),
                  ["cycle.onnx", "cycle"]))
    cases.append(("dangling_input", model([helper.make_node("Add", ["x", "ghost"], ["y"], name="add_1")], [fx], [fy],
                                          name="dangling"),
                  ["dangling.onnx", "node 'add_1'", "'ghost'", "made by no node"]))
    short = onnx.TensorProto()
    short.name, short.data_type, short.raw_data = "w", TensorProto.FLOAT, b"\0" * 20
    short.dims.extend([4, 4])
    cases.append(("short_initializer", model([helper.make_node("Add", ["x", "w"], ["y"])], [fx], [fy], [short],
                                             name="short_init"),
                  ["short_init.onnx", "initializer 'w'", "20 bytes"]))
    ext = onnx.TensorProto()
    ext.name, ext.data_type = "w", TensorProto.FLOAT
    ext.dims.append(3)
    ext.data_location = TensorProto.EXTERNAL
    for key, val in (("location", "../../etc/passwd"), ("offset", "0"), ("length", "12")):
        e = ext.external_data.add()
        e.key, e.value = key, val
    cases.append(("external_escapes", model([helper.make_node("Add", ["x", "w"], ["y"])], [fx], [fy], [ext],
                                            name="ext_escape"),
                  ["ext_escape.onnx", "initializer 'w'", "leaves the model's directory"]))
    ext2 = onnx.TensorProto()
    ext2.CopyFrom(ext)
    ext2.external_data[0].value = "weights.bin"
    open(os.path.join(work, "weights.bin"), "wb").write(b"\0" * 8)
    cases.append(("external_past_end", model([helper.make_node("Add", ["x", "w"], ["y"])], [fx], [fy], [ext2],
                                             name="ext_short"),
                  ["ext_short.onnx", "initializer 'w'", "past the end"]))
    ext3 = onnx.TensorProto()
    ext3.CopyFrom(ext)
    ext3.external_data[0].value = "absent.bin"
    cases.append(("external_missing", model([helper.make_node("Add", ["x", "w"], ["y"])], [fx], [fy], [ext3],
                                            name="ext_missing"),
                  ["ext_missing.onnx", "initializer 'w'", "absent.bin"]))
    strt = helper.make_tensor("s", TensorProto.STRING, [1], [b"a"])
    cases.append(("string_initializer", model([helper.make_node("Identity", ["s"], ["y"])], [fx], [fy], [strt],
                                              name="string_init"),
                  ["string_init.onnx", "'s'", "STRING"]))
    cases.append(("old_opset", model([helper.make_node("Relu", ["x"], ["y"])], [fx], [fy], opset=5, name="opset5"),
                  ["opset5.onnx", "opset 5"]))
    cases.append(("bad_attribute", model([helper.make_node("Conv", ["x4", "w4"], ["y"], name="conv_a", strides="x")],
                                         [helper.make_tensor_value_info("x4", TensorProto.FLOAT, [1, 3, 4, 4])], [fy],
                                         [numpy_helper.from_array(np.ones((2, 3, 1, 1), np.float32), "w4")],
                                         name="bad_attr"),
                  ["bad_attr.onnx", "node 'conv_a'", "strides"]))
    for name, path, required in cases:
        check_error(res, f"{name}.info", eu.run_sampan(args, ["info", "--model", path]), required)
        check_error(res, f"{name}.infer", infer(path), required)

    # --- faults found when shapes are known (run time) ---
    i64c = numpy_helper.from_array(np.ones((2, 3), np.int64), "c")
    p = model([helper.make_node("Add", ["x", "c"], ["y"], name="mixed_add")], [fx], [fy], [i64c], name="dtype_mix")
    check_error(res, "dtype_mismatch.infer", infer(p), ["node 'mixed_add'"])
    w = numpy_helper.from_array(np.ones((4, 5), np.float32), "w")
    p = model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm_1")], [fx], [fy], [w], name="shape_mismatch")
    check_error(res, "shape_mismatch.infer", infer(p), ["node 'mm_1'"])
    idx = numpy_helper.from_array(np.array([0, 7], np.int64), "i")
    p = model([helper.make_node("Gather", ["x", "i"], ["y"], name="gather_1", axis=1)], [fx], [fy], [idx],
              name="gather_oob")
    check_error(res, "gather_index_out_of_range.infer", infer(p), ["node 'gather_1'", "7"])

    # --- bad inputs to a good model ---
    bert = os.path.join(data, "bert_tiny.onnx")
    ids = os.path.join(data, "bert_tiny.0.input_ids.npy")
    mask = os.path.join(data, "bert_tiny.0.attention_mask.npy")
    types = os.path.join(data, "bert_tiny.0.token_type_ids.npy")
    out = os.path.join(work, "out")

    def bert_run(*inputs):
        argv = ["infer", "--model", bert, "--output-dir", out]
        for i in inputs:
            argv += ["--input", i]
        return eu.run_sampan(args, argv)

    check_error(res, "input_missing", bert_run(f"input_ids={ids}", f"attention_mask={mask}"), ["token_type_ids"])
    check_error(res, "input_unnamed", bert_run(ids), ["3 inputs", "input_ids"])
    check_error(res, "input_twice", bert_run(f"input_ids={ids}", f"input_ids={ids}", f"token_type_ids={types}"),
                ["input_ids", "twice"])
    fl = os.path.join(work, "float_ids.npy")
    np.save(fl, np.ones((1, 16), np.float32))
    check_error(res, "input_wrong_dtype", bert_run(f"input_ids={fl}", f"attention_mask={mask}", f"token_type_ids={types}"),
                ["input_ids", "i64", "f32"])
    r3 = os.path.join(work, "rank3_ids.npy")
    np.save(r3, np.ones((1, 16, 1), np.int64))
    check_error(res, "input_wrong_rank", bert_run(f"input_ids={r3}", f"attention_mask={mask}", f"token_type_ids={types}"),
                ["input_ids", "[1, 16, 1]"])
    other = os.path.join(work, "ids_17.npy")
    np.save(other, np.ones((1, 17), np.int64))
    check_error(res, "inputs_disagree_on_a_dimension",
                bert_run(f"input_ids={other}", f"attention_mask={mask}", f"token_type_ids={types}"), ["sequence"])
    big = os.path.join(work, "big_id.npy")
    np.save(big, np.full((1, 16), 100000, np.int64))
    check_error(res, "id_out_of_vocabulary", bert_run(f"input_ids={big}", f"attention_mask={mask}", f"token_type_ids={types}"),
                ["100000"])
    cut = os.path.join(work, "cut.npy")
    open(cut, "wb").write(open(ids, "rb").read()[:-40])
    check_error(res, "npy_truncated", bert_run(f"input_ids={cut}", f"attention_mask={mask}", f"token_type_ids={types}"),
                ["cut.npy", "truncated"])
    huge = os.path.join(work, "huge.npy")
    hdr = "{'descr': '<i8', 'fortran_order': False, 'shape': (99999999999, 99999999999), }"
    hdr += " " * (118 - len(hdr)) + "\n"
    open(huge, "wb").write(b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode() + b"\0" * 64)
    check_error(res, "npy_huge_shape", bert_run(f"input_ids={huge}", f"attention_mask={mask}", f"token_type_ids={types}"),
                ["huge.npy"])
    check_error(res, "language_model_to_infer",
                eu.run_sampan(args, ["infer", "--model", os.path.join(eu.models_dir(args), "tiny_llama3"),
                                     "--input", x, "--output-dir", out]), ["sampan run"])
    shutil.rmtree(out, ignore_errors=True)
    res.finish()


if __name__ == "__main__":
    main()
