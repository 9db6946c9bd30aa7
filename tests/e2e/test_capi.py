"""End-to-end: the C API through its Python binding (clients/python/sampan) and the C example.

  - Predictor logits of every tiny model against the HF goldens (tests/data/golden), as one
    sequence and batched with other rows;
  - greedy generation through Engine.generate: every token is the numpy reference's argmax (or
    within a near-tie), its logprob matches numpy, and it equals `sampan run`'s tokens; the final
    event's usage counts what was streamed; cancel ends a long request early;
  - the C example (clients/c/example.c, built as sampan_c_example) runs and prints the top tokens
    and the generation the Python side computes;
  - LoRA adapters (sampan_config_add_lora, sampan_params_set_lora): greedy tokens through an
    adapter are the argmax of the numpy reference on the merged weights W + (alpha/r) B A
    (merged here in numpy), differ from the base's, equal `sampan run --lora`'s, and requests of
    two adapters and the base submitted together give what each gives alone; an unknown adapter
    name, a duplicate name, a missing directory and a malformed adapter are clear errors.
Environment (set by CTest): SAMPAN_LIBRARY (libsampan.so), SAMPAN_C_EXAMPLE_DIR (its build dir).
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import jsonschema
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402
import serve_util as su  # noqa: E402

# Against the HF goldens: the thresholds of test_llama_logits.py (bf16 weights with bf16
# activation rounding reach cosine >= 0.9999; a wrong RoPE, mask or window falls below 0.95;
# top-1 may flip only at near-ties).
MIN_COSINE = 0.999
MIN_TOP1 = 0.95
# A generated token may lose to numpy's float64 argmax only by a near-tie (bf16 weights, f32
# arithmetic: logits differ by ~1e-3), and logprobs agree to the same order.
MAX_GREEDY_GAP = 0.02
MAX_LOGPROB_DIFF = 0.02
# The C example and the binding run the same library on the same input: the printed logits
# (4 decimals) agree to rounding.
MAX_PRINTED_LOGIT_DIFF = 1e-3
PROMPT = "The function returns a list of"
# Every value bounded (string lengths, digits, list sizes), so that replies end.
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 8}, "n": {"type": "integer"},
    "ok": {"type": "boolean"}, "tags": {"type": "array", "items": {"enum": ["a", "b"]},
                                        "maxItems": 3}},
    "required": ["name", "n", "ok"], "additionalProperties": False}


def library_path(args):
    lib = os.environ.get("SAMPAN_LIBRARY") or os.path.join(os.path.dirname(args.sampan),
                                                           "libsampan.so")
    os.environ["SAMPAN_LIBRARY"] = lib
    return lib


def check_logits(res, sampan, args):
    goldens = sorted(glob.glob(os.path.join(eu.golden_dir(args), "*.json")))
    res.check("goldens present", len(goldens) > 0, f"{len(goldens)} sequences")
    worst = (1.0, 1.0)
    for gpath in goldens:
        with open(gpath) as f:
            meta = json.load(f)
        case = os.path.splitext(os.path.basename(gpath))[0]
        golden = np.load(os.path.splitext(gpath)[0] + ".npy")
        cfg = sampan.Config(os.path.join(eu.models_dir(args), meta["model"]), threads=2)
        with sampan.Predictor(cfg) as p:
            ids = np.array(meta["ids"], dtype=np.int64)
            single = p.run(ids[None, :])
            # Batched with a reversed copy and a constant row: row 0 must not see the others.
            batch = np.stack([ids, ids[::-1], np.full_like(ids, 7)]).astype(np.int32)
            batched = p.run(batch)
            for label, got in (("single", single[0]), ("batched", batched[0])):
                cos = eu.cosine_per_row(got, golden)
                top1 = eu.top1_agreement(got, golden)
                worst = (min(worst[0], cos.min()), min(worst[1], top1))
                res.check(f"{case}.{label}.vs_golden", cos.min() > MIN_COSINE and top1 >= MIN_TOP1,
                          f"min cosine {cos.min():.7f}, top-1 {top1 * 100:.1f} %")
            rev = p.run(ids[::-1][None, :])[0]
            diff = float(np.abs(batched[1] - rev).max())
            res.check(f"{case}.batched_row1_vs_single", diff <= 0.3,
                      f"max |diff| {diff:.4f} (<= 0.3: bf16 rounding on another kernel path)")
        cfg.close()
    print(f"logits: min cosine {worst[0]:.7f} (> {MIN_COSINE}), min top-1 "
          f"{worst[1] * 100:.1f} % (>= {MIN_TOP1 * 100:.0f} %)")


def check_generation(res, sampan, args, model):
    import numpy_llama as ref
    cfg = sampan.Config(model, threads=2, kv_cache_bytes=16 << 20, max_model_len=256)
    with sampan.Engine(cfg) as engine:
        prompt_ids = engine.tokenize(PROMPT)
        gen = engine.generate(PROMPT, max_tokens=16, temperature=0, ignore_eos=True)
        events = list(gen)
        gen.close()
        res.check("generate: 16 tokens then one final event",
                  len(gen.tokens) == 16 and events[-1].finished and
                  sum(e.finished for e in events) == 1,
                  f"{len(gen.tokens)} tokens, {sum(e.finished for e in events)} final events")
        final = events[-1]
        res.check("generate: usage and finish reason",
                  final.finish_reason == "length" and final.completion_tokens == 16 and
                  final.prompt_tokens == len(prompt_ids),
                  f"{final.finish_reason}, prompt {final.prompt_tokens} (want {len(prompt_ids)}), "
                  f"completion {final.completion_tokens}")
        ids, worst_gap, worst_lp = list(prompt_ids), 0.0, 0.0
        token_events = [e for e in events if e.token >= 0]
        for e in token_events:
            logits = ref.logits(model, ids)[-1].astype(np.float64)
            worst_gap = max(worst_gap, logits.max() - logits[e.token])
            log_sm = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
            worst_lp = max(worst_lp, abs(log_sm[e.token] - e.logprob))
            ids.append(e.token)
        res.check("generate: tokens are numpy's argmax", worst_gap <= MAX_GREEDY_GAP,
                  f"max gap {worst_gap:.4g} (<= {MAX_GREEDY_GAP})")
        res.check("generate: logprobs match numpy", worst_lp <= MAX_LOGPROB_DIFF,
                  f"max diff {worst_lp:.4g} (<= {MAX_LOGPROB_DIFF})")

        run = eu.run_sampan(args, ["run", "--model", model, "--prompt", PROMPT, "--temperature",
                                   "0", "--max-tokens", "16", "--ignore-eos"])
        res.check("generate: same text as `sampan run`",
                  run.returncode == 0 and run.stdout.rstrip("\n") == gen.text,
                  f"{gen.text!r} vs {run.stdout!r}" if run.returncode == 0 else run.describe())

        same = engine.generate(prompt_ids, max_tokens=16, temperature=0, ignore_eos=True).result()
        res.check("generate: token-id prompt gives the same tokens", same.tokens == gen.tokens,
                  f"{same.tokens} vs {gen.tokens}")
        same.close()

        # Prompt logprobs through the C API: numpy's log_softmax at each position before the
        # token, on the first event only.
        scored = engine.generate(prompt_ids, max_tokens=2, temperature=0, ignore_eos=True,
                                 prompt_logprobs=True)
        evs = list(scored)
        scored.close()
        logits = ref.logits(model, prompt_ids).astype(np.float64)
        m = logits.max(axis=1, keepdims=True)
        lsm = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
        want = [lsm[t - 1][prompt_ids[t]] for t in range(1, len(prompt_ids))]
        got = scored.prompt_logprobs
        diff = max(abs(g - w) for g, w in zip(got, want)) if got else float("inf")
        res.check("generate(prompt_logprobs=True): numpy's log_softmax of each prompt token",
                  len(got) == len(prompt_ids) - 1 and diff <= MAX_LOGPROB_DIFF and
                  len(evs[0].prompt_logprobs) == len(got) and
                  all(not e.prompt_logprobs for e in evs[1:]),
                  f"{len(got)} for {len(prompt_ids)} tokens, max diff {diff:.4g}")

        # logit_bias against numpy: each greedy token is the argmax of numpy's logits plus the
        # bias (the first greedy token pushed down, two others up by moderate amounts, so the
        # bias changes the path without simply forcing one token).
        bias = {gen.tokens[0]: -6.0, gen.tokens[3]: 2.5, 1234: 4.0}
        biased = engine.generate(prompt_ids, max_tokens=8, temperature=0, ignore_eos=True,
                                 logit_bias=bias).result()
        ids, worst_gap = list(prompt_ids), 0.0
        for t in biased.tokens:
            logits = ref.logits(model, ids)[-1].astype(np.float64)
            for tid, b in bias.items():
                logits[tid] += b
            worst_gap = max(worst_gap, logits.max() - logits[t])
            ids.append(t)
        res.check("generate: logit_bias tokens are the argmax of numpy's logits + bias",
                  len(biased.tokens) == 8 and biased.tokens[0] != gen.tokens[0]
                  and worst_gap <= MAX_GREEDY_GAP,
                  f"{biased.tokens} vs unbiased {gen.tokens[:8]}, max gap {worst_gap:.4g}")
        run = eu.run_sampan(args, ["run", "--model", model, "--prompt", PROMPT, "--temperature",
                                   "0", "--max-tokens", "8", "--ignore-eos"] +
                            [a for tid, b in bias.items() for a in ("--logit-bias", f"{tid}={b}")])
        res.check("generate: logit_bias gives the text of `sampan run --logit-bias`",
                  run.returncode == 0 and run.stdout.rstrip("\n") == biased.text,
                  f"{biased.text!r} vs {run.stdout!r}" if run.returncode == 0 else run.describe())
        # `run --json`: a reply that ends before max-tokens (--stats says why) is one JSON object
        # for Python's json; '"' and '}' are nudged so that the tiny random model closes them.
        ended, objects, bad = 0, 0, []
        for seed in range(4):
            run = eu.run_sampan(args, ["run", "--model", model, "--prompt", "JSON:", "--json",
                                       "--max-tokens", "60", "--seed", str(seed), "--stats",
                                       "--logit-bias", "29913=6", "--logit-bias", "29908=6"])
            if run.returncode != 0:
                bad.append(run.describe())
                continue
            if "finish stop" in run.stderr:
                ended += 1
                try:
                    objects += isinstance(json.loads(run.stdout.rstrip("\n")), dict)
                except ValueError:
                    bad.append(run.stdout)
        res.check("`sampan run --json`: every reply that ends is one JSON object",
                  ended >= 2 and objects == ended and not bad,
                  f"{objects} objects of {ended} ended runs of 4; {bad[:1]}")
        # The binding's json_object: the same constraint through the C API.
        ended, objects, texts = 0, 0, []
        for seed in range(4):
            g = engine.generate("JSON:", max_tokens=60, temperature=1.0, seed=seed,
                                json_object=True, logit_bias={29913: 6.0, 29908: 6.0}).result()
            texts.append(g.text)
            if g.final.finish_reason == "stop":
                ended += 1
                try:
                    objects += isinstance(json.loads(g.text), dict)
                except ValueError:
                    pass
            g.close()
        res.check("generate(json_object=True): every reply that stops is one JSON object",
                  ended >= 2 and objects == ended, f"{objects} of {ended} of 4: {texts[:2]}")
        # json_schema through the binding (the engine) and `sampan run --json-schema`
        # (generate()): replies that stop validate with Python's jsonschema, and the two paths
        # give the same text for the same seed.
        ended, valid, bad = 0, 0, []
        for seed in range(4):
            g = engine.generate("JSON:", max_tokens=80, temperature=1.0, seed=seed,
                                json_schema=SCHEMA, logit_bias={29913: 4.0}).result()
            run = eu.run_sampan(args, ["run", "--model", model, "--prompt", "JSON:",
                                       "--json-schema", json.dumps(SCHEMA), "--max-tokens", "80",
                                       "--temperature", "1", "--seed", str(seed),
                                       "--logit-bias", "29913=4"])
            if run.returncode != 0 or run.stdout.rstrip("\n") != g.text:
                bad.append((g.text, run.describe() if run.returncode else run.stdout))
            if g.final.finish_reason == "stop":
                ended += 1
                try:
                    jsonschema.validate(json.loads(g.text), SCHEMA)
                    valid += 1
                except (ValueError, jsonschema.ValidationError) as e:
                    bad.append((g.text, str(e)[:200]))
            g.close()
        res.check("generate(json_schema=...) == `run --json-schema`; replies that stop validate "
                  "(jsonschema)", ended >= 3 and valid == ended and not bad,
                  f"{valid} valid of {ended} stopped of 4; {bad[:2]}")
        for schema, word in (({"type": "string", "pattern": "(?=a)"}, "pattern"), ("{", "JSON")):
            try:
                engine.generate("x", max_tokens=2, json_schema=schema)
                res.check(f"generate(json_schema=<bad: {word}>) is refused", False, "no error")
            except sampan.SampanError as e:
                res.check(f"generate(json_schema=<bad: {word}>) is refused naming it",
                          e.status == sampan.INVALID_ARGUMENT and word in str(e), str(e))
        run = eu.run_sampan(args, ["run", "--model", model, "--prompt", "x", "--json-schema",
                                   '{"type": "object", "minProperties": 1}'])
        res.check("`sampan run --json-schema` with an unsupported keyword fails naming it",
                  run.returncode != 0 and "/minProperties" in run.stderr
                  and "Traceback" not in run.stderr, run.describe())
        run = eu.run_sampan(args, ["run", "--model", model, "--prompt", PROMPT, "--max-tokens",
                                   "2", "--logit-bias", "5=101"])
        res.check("`sampan run --logit-bias 5=101` is refused naming the flag",
                  run.returncode != 0 and "--logit-bias" in run.stderr, run.describe())
        biased.close()

        long = engine.generate(prompt_ids, max_tokens=200, temperature=0, ignore_eos=True)
        first = next(long)
        long.cancel()
        long.result()
        res.check("generate: cancel ends the request early",
                  first.token >= 0 and long.final.finish_reason == "cancelled" and
                  long.final.completion_tokens < 200,
                  f"{long.final.finish_reason}, {long.final.completion_tokens} tokens")
        long.close()
    cfg.close()
    return gen.tokens, gen.text


def merged_copy(model_dir, adapter, out, scale):
    """The model with W + scale * B A folded in (f32, numpy) for the numpy reference."""
    import safetensors_io
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(model_dir, out)
    path = os.path.join(out, "model.safetensors")
    t = {k: np.asarray(v, dtype=np.float64) for k, v in safetensors_io.load_file(path).items()}
    for name, a in adapter.items():
        if not name.endswith(".lora_A.weight"):
            continue
        base = name[len("base_model.model."):-len(".lora_A.weight")] + ".weight"
        b = adapter[name.replace("lora_A", "lora_B")].astype(np.float64)
        t[base] = t[base] + scale * (b @ a.astype(np.float64))
    safetensors_io.save_file({k: v.astype(np.float32) for k, v in t.items()}, path)
    return out


def check_lora(res, sampan, args, model):
    import numpy_llama as ref
    adapters = {"alpha": os.path.join(args.work_dir, "capi_lora_alpha"),
                "beta": os.path.join(args.work_dir, "capi_lora_beta")}
    tensors = {name: eu.write_peft_adapter(model, d, 4, seed, b_std=0.05) for (name, d), seed in
               zip(adapters.items(), (5, 6))}
    cfg = sampan.Config(model, threads=2, kv_cache_bytes=16 << 20, max_model_len=256,
                        lora=adapters)
    res.check("lora: config lists the adapters in order", cfg.loras == adapters, str(cfg.loras))
    try:
        cfg.add_lora("alpha", adapters["beta"])
        res.check("lora: a duplicate name is refused", False, "no error")
    except sampan.SampanError as e:
        res.check("lora: a duplicate name is refused",
                  e.status == sampan.INVALID_ARGUMENT and "'alpha'" in str(e), str(e))
    n = 12
    with sampan.Engine(cfg) as engine:
        prompt_ids = engine.tokenize(PROMPT)
        alone = {}
        for name in (None, "alpha", "beta"):
            g = engine.generate(prompt_ids, max_tokens=n, temperature=0, ignore_eos=True,
                                lora=name)
            alone[name] = g.result().tokens
            g.close()
        for name in ("alpha", "beta"):
            merged = merged_copy(model, tensors[name],
                                 os.path.join(args.work_dir, f"capi_merged_{name}"), 2.0)
            ids, gap = list(prompt_ids), 0.0
            for tok in alone[name]:
                logits = ref.logits(merged, ids)[-1].astype(np.float64)
                gap = max(gap, logits.max() - logits[tok])
                ids.append(tok)
            res.check(f"lora {name}: tokens are numpy's argmax on the merged weights",
                      gap <= MAX_GREEDY_GAP, f"max gap {gap:.4g} (<= {MAX_GREEDY_GAP})")
            res.check(f"lora {name}: differs from the base", alone[name] != alone[None],
                      f"{alone[name]} vs base {alone[None]}")
            run = eu.run_sampan(args, ["run", "--model", model, "--lora", adapters[name],
                                       "--prompt", PROMPT, "--temperature", "0", "--max-tokens",
                                       str(n), "--ignore-eos"])
            want = engine.generate(prompt_ids, max_tokens=n, temperature=0, ignore_eos=True,
                                   lora=name)
            text = want.result().text
            want.close()
            res.check(f"lora {name}: same text as `sampan run --lora`",
                      run.returncode == 0 and run.stdout.rstrip("\n") == text,
                      f"{text!r} vs {run.stdout!r}" if run.returncode == 0 else run.describe())
        gens = {name: engine.generate(prompt_ids, max_tokens=n, temperature=0, ignore_eos=True,
                                      lora=name) for name in (None, "alpha", "beta", "") }
        together = {name: g.result().tokens for name, g in gens.items()}
        for g in gens.values():
            g.close()
        res.check("lora: base and two adapters together == each alone",
                  all(together[k] == alone[k] for k in (None, "alpha", "beta")) and
                  together[""] == alone[None],
                  f"together {together}, alone {alone}")
        try:
            engine.generate(prompt_ids, max_tokens=2, lora="gamma")
            res.check("lora: an unknown adapter name is refused", False, "no error")
        except sampan.SampanError as e:
            res.check("lora: an unknown adapter name is refused",
                      e.status == sampan.INVALID_ARGUMENT and "'gamma'" in str(e) and
                      "alpha" in str(e), str(e))
    cfg.close()
    missing = os.path.join(args.work_dir, "capi_lora_missing")
    bad = sampan.Config(model, threads=1, kv_cache_bytes=16 << 20, max_model_len=64,
                        lora={"x": missing})
    try:
        sampan.Engine(bad).close()
        res.check("lora: a missing adapter directory fails engine creation", False, "no error")
    except sampan.SampanError as e:
        res.check("lora: a missing adapter directory fails engine creation",
                  e.status == sampan.NOT_FOUND and missing in str(e), str(e))
    bad.close()
    broken = os.path.join(args.work_dir, "capi_lora_broken")
    os.makedirs(broken, exist_ok=True)
    with open(os.path.join(broken, "adapter_config.json"), "w") as f:
        f.write("{")
    bad = sampan.Config(model, threads=1, kv_cache_bytes=16 << 20, max_model_len=64,
                        lora={"x": broken})
    try:
        sampan.Engine(bad).close()
        res.check("lora: a malformed adapter_config.json fails engine creation", False, "no error")
    except sampan.SampanError as e:
        res.check("lora: a malformed adapter_config.json fails engine creation",
                  e.status == sampan.INVALID_ARGUMENT and "adapter_config.json" in str(e), str(e))
    bad.close()


def check_c_example(res, sampan, args, model, tokens, text):
    exe = os.path.join(os.environ.get("SAMPAN_C_EXAMPLE_DIR", os.path.dirname(args.sampan)),
                       "sampan_c_example")
    if not res.check("c example built", os.path.isfile(exe), exe):
        return
    ids = [1, 450, 740, 3639, 263, 1051, 310]
    argv = [exe, model, "--ids", ",".join(map(str, ids)), "--prompt", PROMPT, "--max-tokens", "16",
            "--threads", "2"]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=eu.RUN_TIMEOUT_S,
                           env=dict(os.environ, SAMPAN_LOG_LEVEL="warn"))
    except subprocess.TimeoutExpired:
        res.check("c example runs", False, "timed out")
        return
    if not res.check("c example runs", p.returncode == 0,
                     f"exit {p.returncode}: {p.stderr.strip()[-500:]}"):
        return
    out = p.stdout
    with sampan.Predictor(sampan.Config(model, threads=2)) as pred:
        logits = pred.run(np.array([ids]))[0]
    want_top = [(int(i), float(logits[pos, i])) for pos, i in enumerate(logits.argmax(axis=1))]
    got_top = [(int(m.group(2)), float(m.group(3)))
               for m in re.finditer(r"^top\[(\d+)\]: (\d+) (-?[\d.]+)$", out, re.M)]
    ok = len(got_top) == len(want_top) and all(
        g[0] == w[0] and abs(g[1] - w[1]) <= MAX_PRINTED_LOGIT_DIFF
        for g, w in zip(got_top, want_top))
    res.check("c example: top token per position as the binding computes", ok,
              f"{got_top} vs {want_top}")
    m = re.search(r"^tokens:(.*)$", out, re.M)
    got_tokens = [int(t) for t in m.group(1).split()] if m else None
    res.check("c example: generated tokens as the binding's", got_tokens == tokens,
              f"{got_tokens} vs {tokens}")
    res.check("c example: streamed text as the binding's", f"generated: {text}\n" in out,
              f"stdout {out!r}")
    m = re.search(r"^finish: (\w+) prompt_tokens=(\d+) completion_tokens=(\d+)$", out, re.M)
    res.check("c example: finish line", m is not None and m.group(1) == "length" and
              int(m.group(3)) == 16, m.group(0) if m else "missing")


def main():
    args = eu.parse_args(__doc__.splitlines()[0])
    os.environ.setdefault("SAMPAN_LOG_LEVEL", "warn")
    lib = library_path(args)
    eu.sanitizer_preload(lib)
    sys.path.insert(0, os.path.join(args.source_dir, "clients", "python"))
    res = eu.Results()
    if not res.check("libsampan present", os.path.isfile(lib), lib):
        res.finish()
    import sampan
    res.check("binding loads", sampan.version() == "0.1.0", sampan.version())

    check_logits(res, sampan, args)
    model = su.make_serve_model(args)
    tokens, text = check_generation(res, sampan, args, model)
    check_c_example(res, sampan, args, model, tokens, text)
    check_lora(res, sampan, args, model)
    res.finish()


if __name__ == "__main__":
    main()
