#!/usr/bin/env python3
"""Bad input to `sampan finetune`: every case exits non-zero (1 for a bad file or value, 2 for a
usage error) with one "error: ..." line naming what is wrong and where — never a crash. Runs
under the sanitizers too (test_bad* files get the sanitize label)."""

import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util  # noqa: E402
import serve_util  # noqa: E402


def write(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    return path


def main():
    args = e2e_util.parse_args(__doc__.split("\n")[0])
    res = e2e_util.Results()
    e2e_util.require_binary(args, res)
    model = serve_util.make_serve_model(args)
    work = os.path.join(args.work_dir, "bad_finetune")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    good = json.dumps({"text": "The quick brown fox jumps over the lazy dog."})
    data = write(os.path.join(work, "good.jsonl"), [good] * 4)
    out = os.path.join(work, "out")

    def expect(name, argv, code, needles, base=model, out_dir=out):
        r = e2e_util.run_sampan(args, ["finetune", "--model", base, "--out", out_dir,
                                       "--threads", "1", "--seq-len", "32"] + argv)
        errors = [ln for ln in r.stderr.split("\n") if ln.startswith("error:")]
        last = r.last_stderr_line()
        ok = (r.returncode == code and len(errors) == 1 and last.startswith("error:") and
              all(n in last for n in needles))
        res.check(name, ok, last if ok else r.describe())

    bad_json = write(os.path.join(work, "bad_json.jsonl"), [good, good, '{"text": "no end'])
    expect("bad JSON line named", ["--data", bad_json], 1, ["bad_json.jsonl:3:", "not JSON"])
    no_field = write(os.path.join(work, "no_field.jsonl"), [good, '{"txt": "x"}'])
    expect("line without a known form", ["--data", no_field], 1, ["no_field.jsonl:2:", "none of"])
    half = write(os.path.join(work, "half.jsonl"), ['{"prompt": "q"}'])
    expect("prompt without completion", ["--data", half], 1, ["half.jsonl:1:", "\"completion\""])
    wrong_type = write(os.path.join(work, "wrong_type.jsonl"), ['{"text": ["a"]}'])
    expect("text of the wrong type", ["--data", wrong_type], 1, ["wrong_type.jsonl:1:", "array"])
    no_asst = write(os.path.join(work, "no_asst.jsonl"),
                    [json.dumps({"messages": [{"role": "user", "content": "hi"}]})])
    expect("messages without an assistant turn", ["--data", no_asst], 1,
           ["no_asst.jsonl:1:", "assistant"])
    long_prompt = json.dumps({"prompt": "word " * 200, "completion": "x"})
    all_long = write(os.path.join(work, "all_long.jsonl"), [long_prompt] * 3)
    expect("no example left to learn from", ["--data", all_long], 1,
           ["all_long.jsonl", "none of the 3 examples"])
    expect("missing data file", ["--data", os.path.join(work, "nope.jsonl")], 1, ["nope.jsonl"])
    expect("unknown target module", ["--data", data, "--targets", "q_proj,qkv_proj"], 1,
           ["--targets", "qkv_proj"])
    expect("--steps with --epochs", ["--data", data, "--steps", "2", "--epochs", "1"], 2,
           ["--steps", "--epochs"])
    expect("--seq-len 1", ["--data", data, "--seq-len", "1"], 2, ["--seq-len"])
    expect("--precision fp16", ["--data", data, "--precision", "fp16"], 1, ["--precision", "fp16"])
    expect("--resume without a checkpoint", ["--data", data, "--resume"], 1,
           ["--resume", "checkpoint"], out_dir=os.path.join(work, "fresh"))
    # A checkpoint of rank 4, resumed with rank 8.
    r = e2e_util.run_sampan(args, ["finetune", "--model", model, "--out", out, "--threads", "1",
                                   "--seq-len", "32", "--data", data, "--steps", "1", "--rank",
                                   "4"])
    if res.check("a one-step run for the resume case", r.returncode == 0, r.describe()):
        expect("--resume with another rank", ["--data", data, "--steps", "1", "--rank", "8",
                                              "--resume"], 1, ["--resume", "rank", "4", "8"])
    expect("not a model", ["--data", data], 1, [work], base=work)
    res.finish()


if __name__ == "__main__":
    main()
