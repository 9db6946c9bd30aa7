"""End-to-end: `sampan infer` on the Paddle classic models (PIR json / legacy .pdmodel) against paddle.

The models, inputs and paddle's outputs are committed in tests/data/classic_paddle (made once by
tests/reference/make_paddle_models.py with paddlepaddle 3.3.1). For every model, form and path
form (the directory, the prefix `<dir>/inference`, the program file), `sampan infer` must agree
with paddle to cosine >= 0.99999 and max relative error <= 1e-4, and `sampan info` must list the
inputs and outputs. Damaged models must fail with one line "error: ..." and a non-zero exit:
truncated params, params shorter than the program declares (naming the parameter), a missing
params file, an unknown op, a truncated .pdmodel; for the legacy form a truncated .pdmodel, an
unknown op (the ProgramDesc edited with protobuf's python API), params shorter than declared.
"""

import json
import os
import re
import shutil
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


def one_line_error(res, name, run, pattern):
    lines = [ln for ln in run.stderr.strip().splitlines() if ln.strip()]
    ok = (run.returncode > 0 and len(lines) == 1 and lines[0].startswith("error: ")
          and re.search(pattern, lines[0]) is not None)
    res.check(name, ok, run.describe())


def edit_pdmodel(args, blob):
    """Renames the first relu op of a ProgramDesc to relu7; (bytes, op index) or None."""
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: F401
    except ImportError:
        return None
    import subprocess
    import tempfile
    proto_dir = os.path.join(args.source_dir, "proto", "formats")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "fds.pb")
        try:
            subprocess.run(["protoc", f"-I{proto_dir}", f"--descriptor_set_out={out}", "paddle_framework.proto"],
                           check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError):
            return None
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)
    pkg = fds.file[0].package
    desc = pool.FindMessageTypeByName(f"{pkg}.ProgramDesc")
    try:
        cls = message_factory.GetMessageClass(desc)
    except AttributeError:
        cls = message_factory.MessageFactory(pool).GetPrototype(desc)
    prog = cls()
    prog.ParseFromString(blob)
    idx = next(i for i, op in enumerate(prog.blocks[0].ops) if op.type == "relu")
    prog.blocks[0].ops[idx].type = "relu7"
    return prog.SerializeToString(), idx


def sanitize(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def main():
    args = eu.parse_args(__doc__.splitlines()[0])
    res = eu.Results()
    eu.require_binary(args, res)
    data = os.path.join(args.source_dir, "tests", "data", "classic_paddle")
    with open(os.path.join(data, "manifest.json")) as f:
        manifest = json.load(f)
    models = [m for m in manifest if not m.startswith("_")]
    res.check("manifest lists the models", set(models) >= {"resnet_tiny", "bert_tiny"}, ", ".join(models))

    for model in models:
        spec = manifest[model]
        for form, fspec in sorted(spec["forms"].items()):
            d = os.path.join(data, model, form)
            paths = {"dir": d, "prefix": os.path.join(d, "inference"), "program": os.path.join(d, fspec["program"])}
            info = eu.run_sampan(args, ["info", "--model", paths["dir"]])
            ok = info.returncode == 0 and all(
                re.search(rf"^(input|output):\s+{re.escape(n)} ", info.stdout, re.M)
                for n in spec["inputs"] + fspec["outputs"])
            res.check(f"{model}.{form}.info", ok, info.describe() if not ok else "")
            for pf, path in paths.items():
                for k in spec["cases"]:
                    out_dir = os.path.join(args.work_dir, f"{model}.{form}.{pf}.{k}")
                    argv = ["infer", "--model", path, "--output-dir", out_dir, "--threads", "2"]
                    for n in spec["inputs"]:
                        argv += ["--input", f"{n}={os.path.join(data, f'{model}.{k}.{n}.npy')}"]
                    run = eu.run_sampan(args, argv)
                    tag = f"{model}.{form}.{pf}.{k}"
                    if not res.check(f"{tag}.infer runs", run.returncode == 0, run.describe() if run.returncode else ""):
                        continue
                    for prog_name, ref_name in zip(fspec["outputs"], spec["outputs"]):
                        got = np.load(os.path.join(out_dir, sanitize(prog_name) + ".npy"))
                        suffix = fspec.get("reference_suffix", "")
                        want = np.load(os.path.join(data, f"{model}.{k}.{ref_name}{suffix}.npy"))
                        compare(res, f"{tag}.{ref_name} vs paddle", got, want)

    # ---- damaged models (copies of the PIR resnet) ----
    src = os.path.join(data, "resnet_tiny", "pir")
    img = os.path.join(data, "resnet_tiny.0.images.npy")

    def copy(name):
        d = os.path.join(args.work_dir, "bad", name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(src, d)
        return d

    def infer(d):
        return eu.run_sampan(args, ["infer", "--model", d, "--input", f"images={img}",
                                    "--output-dir", os.path.join(args.work_dir, "bad_out")])

    params = open(os.path.join(src, "inference.pdiparams"), "rb").read()
    d = copy("truncated_params")
    with open(os.path.join(d, "inference.pdiparams"), "wb") as f:
        f.write(params[: len(params) - 37])
    one_line_error(res, "truncated params", infer(d), r"inference\.pdiparams.*ends inside parameter '[^']+'")

    # Shorter than the program declares: the last parameter (sorted names) is cut off entirely.
    with open(os.path.join(src, "inference.json")) as f:
        prog = json.load(f)
    names = sorted(op["A"][-1] for op in prog["program"]["regions"][0]["blocks"][0]["ops"] if op["#"] == "p")
    d = copy("short_params")
    # Remove the last tensor: find its start by re-walking the layout.
    pos, starts = 0, []
    while pos < len(params):
        starts.append(pos)
        lod = int.from_bytes(params[pos + 4:pos + 12], "little")
        p = pos + 12
        for _ in range(lod):
            n = int.from_bytes(params[p:p + 8], "little")
            p += 8 + n
        p += 4
        dsz = int.from_bytes(params[p:p + 4], "little")
        desc = params[p + 4:p + 4 + dsz]
        p += 4 + dsz
        # TensorDesc: field 1 varint data_type, field 2 dims (varints, packed or not)
        i, numel, dtype = 0, 1, 5
        while i < len(desc):
            key = desc[i]
            i += 1

            def varint():
                nonlocal i
                v, s = 0, 0
                while True:
                    b = desc[i]
                    i += 1
                    v |= (b & 0x7F) << s
                    s += 7
                    if b < 0x80:
                        return v
            if key == 0x08:
                dtype = varint()
            elif key == 0x10:
                numel *= varint()
            elif key == 0x12:
                ln = varint()
                end = i + ln
                while i < end:
                    numel *= varint()
        size = {5: 4, 3: 8, 2: 4, 6: 8, 0: 1, 20: 1, 21: 1}[dtype]
        pos = p + numel * size
    res.check("params layout walk", pos == len(params) and len(starts) == len(names), f"{len(starts)} tensors")
    with open(os.path.join(d, "inference.pdiparams"), "wb") as f:
        f.write(params[: starts[-1]])
    one_line_error(res, "params shorter than the program", infer(d),
                   rf"ends inside parameter '{re.escape(names[-1])}' \({len(names)} of {len(names)}")

    d = copy("missing_params")
    os.remove(os.path.join(d, "inference.pdiparams"))
    run = eu.run_sampan(args, ["infer", "--model", os.path.join(d, "inference.json"), "--input", f"images={img}",
                               "--output-dir", os.path.join(args.work_dir, "bad_out")])
    one_line_error(res, "missing params file", run, r"inference\.pdiparams.*not found")

    d = copy("unknown_op")
    ops = prog["program"]["regions"][0]["blocks"][0]["ops"]
    idx = next(i for i, op in enumerate(ops) if op["#"] == "1.relu")
    bad = json.loads(json.dumps(prog))
    bad["program"]["regions"][0]["blocks"][0]["ops"][idx]["#"] = "1.relu7"
    with open(os.path.join(d, "inference.json"), "w") as f:
        json.dump(bad, f)
    one_line_error(res, "unknown op", infer(d),
                   rf"inference\.json: node 'pd_op\.relu7_{idx}': op 'relu7' is not supported")

    d = copy("bad_json")
    with open(os.path.join(d, "inference.json"), "w") as f:
        f.write(json.dumps(prog)[:500])
    one_line_error(res, "truncated json", infer(d), r"inference\.json: is not a PIR json program")

    # A truncated legacy program: a ProgramDesc cut inside a field.
    d = os.path.join(args.work_dir, "bad", "pdmodel")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    # ProgramDesc{blocks: [BlockDesc{idx: 0, parent_idx: -1, ...}]} cut short: field 1, length 40,
    # only a few bytes follow.
    with open(os.path.join(d, "inference.pdmodel"), "wb") as f:
        f.write(bytes([0x0A, 40, 0x08, 0x00, 0x10]))
    shutil.copy(os.path.join(src, "inference.pdiparams"), os.path.join(d, "inference.pdiparams"))
    one_line_error(res, "truncated pdmodel", infer(d), r"inference\.pdmodel: is not a Paddle ProgramDesc")

    # ---- damaged legacy models (copies of the legacy resnet) ----
    lsrc = os.path.join(data, "resnet_tiny", "legacy")
    if os.path.isdir(lsrc):
        def lcopy(name):
            d = os.path.join(args.work_dir, "bad", name)
            shutil.rmtree(d, ignore_errors=True)
            shutil.copytree(lsrc, d)
            return d

        pdmodel = open(os.path.join(lsrc, "inference.pdmodel"), "rb").read()
        d = lcopy("legacy_truncated_pdmodel")
        with open(os.path.join(d, "inference.pdmodel"), "wb") as f:
            f.write(pdmodel[: len(pdmodel) // 2])
        one_line_error(res, "legacy truncated pdmodel", infer(d), r"inference\.pdmodel: is not a Paddle ProgramDesc")

        # An unknown op: the ProgramDesc edited through protobuf's python API (Sampan's own schema
        # compiled at run time, so no paddle is needed).
        edited = edit_pdmodel(args, pdmodel)
        if edited is None:
            res.check("legacy unknown op (protobuf python API available)", False, "no google.protobuf / protoc")
        else:
            blob, idx = edited
            d = lcopy("legacy_unknown_op")
            with open(os.path.join(d, "inference.pdmodel"), "wb") as f:
                f.write(blob)
            one_line_error(res, "legacy unknown op", infer(d),
                           rf"inference\.pdmodel: node 'relu7_{idx}': op 'relu7' is not supported")

        lparams = open(os.path.join(lsrc, "inference.pdiparams"), "rb").read()
        d = lcopy("legacy_short_params")
        with open(os.path.join(d, "inference.pdiparams"), "wb") as f:
            f.write(lparams[: len(lparams) - 100])
        one_line_error(res, "legacy params shorter than the program", infer(d),
                       r"inference\.pdiparams.*ends inside parameter '[^']+'")

    # HF and ONNX directories are not claimed: a directory with config.json is not a Paddle model.
    d = os.path.join(args.work_dir, "bad", "hf_like")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(src, d)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write("{}")
    run = eu.run_sampan(args, ["info", "--model", d])
    res.check("config.json directory not claimed", "paddle" not in run.stdout.lower() or run.returncode != 0, run.describe())
    res.finish()


if __name__ == "__main__":
    main()
