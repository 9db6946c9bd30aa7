"""End-to-end: `sampan bench` reports what it measured, and `--batch` measures batched decode.

1. The JSON line parses; prompt_len/gen echo the flags; decode_bytes_per_token equals the bytes of
   every matrix a decode step multiplies (q/k/v/o/gate/up/down of every layer and the LM head),
   summed here from the safetensors header independently of Sampan.
2. `--batch 1,3,4`: one entry per batch size, in order. All B requests are submitted together,
   so the engine prefills them together and then every one of the gen - 1 remaining tokens is
   a step decoding all B sequences: `steps` must equal gen - 1 for every B (a scheduler that
   split the batch, or a bench that timed the wrong steps, would show fewer). The requests reach
   the engine one at a time, so its first steps may admit them in turn: each admission step
   after the first costs one all-B step, hence gen - B <= steps <= gen - 1. B = 1's
   step_vs_batch1 is 1, tok_s = B / step_s, and every step time is positive.
   Prompts that outgrow one step's token budget (512 tokens): B x 300 tokens take
   P = ceil(300 B / 512) steps to prefill while the first requests already decode, so each
   request decodes P more tokens and all B still share about gen - 1 steps: at least gen - 2
   (a step of slack for the budget the decodes take), at most gen + P - 1 (before, 8 prompts of
   512 tokens with --gen 4 left no step decoding all 8, and B = 3 x 300 one step of 3).
3. `--profile`: stdout is still the one JSON line; stderr has the profiled pass's wall time per
   token, the kernels' total per token (not more than the wall time it was measured within), one
   line per op type whose times add up to that total (to the printed rounding), `linear` and
   `attention` among them, and the ten slowest nodes.
4. Bad values: --batch 0, --batch x, --batch-prompt-len 0 are one error line and exit code 2
   (CLI parse errors), before any model is loaded.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402
import serve_util as su  # noqa: E402

GEN = 12
BATCHES = [1, 3, 4]


def linear_bytes(model_dir):
    import safetensors_io

    header, _, _ = safetensors_io.read_header(os.path.join(model_dir, "model.safetensors"))
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    total = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        size = info["data_offsets"][1] - info["data_offsets"][0]
        if name.endswith("_proj.weight") or name == "lm_head.weight":
            total += size
        elif name == "model.embed_tokens.weight" and cfg.get("tie_word_embeddings", False):
            total += size  # also the LM head
    return total


def main():
    args = eu.parse_args(__doc__.splitlines()[0])
    res = eu.Results()
    eu.require_binary(args, res)
    sys.path.insert(0, os.path.join(args.source_dir, "tests", "reference"))
    model = su.make_serve_model(args)

    run = eu.run_sampan(args, ["bench", "--model", model, "--prompt-len", "8", "--gen", str(GEN),
                               "--repeat", "1", "--threads", "1", "--batch",
                               ",".join(map(str, BATCHES)), "--batch-prompt-len", "6"])
    if not res.check("bench.exit", run.returncode == 0, run.describe()):
        res.finish()
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("{")]
    if not res.check("bench.one_json_line", len(lines) == 1, f"{len(lines)} JSON lines"):
        res.finish()
    j = json.loads(lines[0])
    res.check("bench.echo", j["prompt_len"] == 8 and j["gen"] == GEN and j["threads"] == 1,
              f"prompt_len {j['prompt_len']} gen {j['gen']} threads {j['threads']}")
    want = linear_bytes(model)
    res.check("bench.decode_bytes_per_token", j["decode_bytes_per_token"] == want,
              f"sampan {j['decode_bytes_per_token']}, safetensors header {want}")
    res.check("bench.rates_positive", j["prefill_tok_s"] > 0 and j["decode_tok_s"] > 0,
              f"prefill {j['prefill_tok_s']} decode {j['decode_tok_s']}")

    figs = j.get("batch_decode", [])
    res.check("batch.entries", [f["batch"] for f in figs] == BATCHES,
              f"batches {[f['batch'] for f in figs]}, want {BATCHES}")
    res.check("batch.prompt_len", j.get("batch_prompt_len") == 6, str(j.get("batch_prompt_len")))
    for f in figs:
        b = f["batch"]
        res.check(f"batch{b}.steps", GEN - b <= f["steps"] <= GEN - 1,
                  f"{f['steps']} steps decoded all {b} sequences, want {GEN - b}..{GEN - 1}")
        res.check(f"batch{b}.step_s", f["step_s"] > 0, str(f["step_s"]))
        res.check(f"batch{b}.tok_s", abs(f["tok_s"] - b / f["step_s"]) <= 0.01 * f["tok_s"] + 0.01,
                  f"tok_s {f['tok_s']} vs {b} / {f['step_s']}")
        if b == 1:
            res.check("batch1.ratio_is_one", f.get("step_vs_batch1") == 1.0,
                      str(f.get("step_vs_batch1")))
        else:
            r = f.get("step_vs_batch1")
            res.check(f"batch{b}.ratio", r is not None and abs(r - f["step_s"] / figs[0]["step_s"])
                      <= 2e-3 * r + 1e-3, f"{r} vs {f['step_s']} / {figs[0]['step_s']}")

    run = eu.run_sampan(args, ["bench", "--model", model, "--prompt-len", "8", "--gen", str(GEN),
                               "--repeat", "1", "--threads", "1", "--batch", "3,8",
                               "--batch-prompt-len", "300"])
    if res.check("long_batch.exit", run.returncode == 0, run.describe()):
        lines = [ln for ln in run.stdout.splitlines() if ln.startswith("{")]
        figs = json.loads(lines[-1]).get("batch_decode", []) if lines else []
        res.check("long_batch.entries", [f["batch"] for f in figs] == [3, 8], str(figs))
        for f in figs:
            b = f["batch"]
            p = (300 * b + 511) // 512
            res.check(f"long_batch{b}.steps", GEN - 2 <= f["steps"] <= GEN + p - 1,
                      f"{f['steps']} steps decoded all {b}, want {GEN - 2}..{GEN + p - 1}")

    run = eu.run_sampan(args, ["bench", "--model", model, "--prompt-len", "8", "--gen", "6",
                               "--repeat", "1", "--threads", "1", "--profile"])
    if res.check("profile.exit", run.returncode == 0, run.describe()):
        lines = [ln for ln in run.stdout.splitlines() if ln.startswith("{")]
        res.check("profile.one_json_line", len(lines) == 1 and json.loads(lines[0])["gen"] == 6,
                  run.stdout[-300:])
        err = run.stderr.splitlines()
        wall = [ln for ln in err if ln.startswith("decode, profiled: ")]
        total = [ln for ln in err if ln.startswith("profile: ")]
        ok = len(wall) == 1 and len(total) == 1 and total[0].endswith("ms per token in kernels")
        if res.check("profile.header", ok, run.stderr[-600:]):
            wall_ms = float(wall[0].split()[2])
            total_ms = float(total[0].split()[1])
            res.check("profile.within_wall", 0 < total_ms <= wall_ms, f"{total_ms} vs {wall_ms}")
            start = err.index(total[0]) + 1
            ops = {}
            nodes = 0
            for ln in err[start:]:
                f = ln.split()
                if len(f) >= 4 and f[0] == "node":
                    nodes += 1
                elif len(f) == 5 and f[2] == "ms" and f[4] == "%":
                    ops[f[0]] = float(f[1])
            res.check("profile.ops", "linear" in ops and "attention" in ops, str(sorted(ops)))
            res.check("profile.ops_sum", abs(sum(ops.values()) - total_ms) <= 1e-3 * (len(ops) + 1),
                      f"{sum(ops.values())} vs {total_ms}")
            res.check("profile.nodes", nodes == 10, f"{nodes} node lines")

    for name, flags in (("batch_zero", ["--batch", "0"]), ("batch_word", ["--batch", "x"]),
                        ("batch_prompt_zero", ["--batch", "2", "--batch-prompt-len", "0"])):
        run = eu.run_sampan(args, ["bench", "--model", model] + flags)
        lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
        res.check(f"bad.{name}", run.returncode == 2 and len(lines) >= 1 and
                  ("--batch" in lines[0]) and not run.stdout.strip(), run.describe())
    res.finish()


if __name__ == "__main__":
    main()
