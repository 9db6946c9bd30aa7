#!/usr/bin/env python3
"""`sampan serve --lora NAME=DIR`: one server, one engine, the base model and two LoRA adapters
picked per request by the model name (OpenAI `model`, KServe model name, Generate `model`).

The adapters are written here in PEFT's format with numpy (random A and B, large enough to change
greedy text). Checks:
  * /v1/models lists the base and each adapter (parent: the base);
  * greedy completions through each adapter equal `sampan run --lora DIR` (the single-sequence
    CLI path) and the base's equal `sampan run` without one; the adapters change the text;
  * the same requests sent all at once (base and both adapters batched into shared engine
    steps, a long shared prompt prefix included) give exactly the answers each gave alone, and a
    prompt cached by the base is not reused for an adapter (its answer stays the adapter's);
  * KServe v2 REST infer and gRPC Generate with an adapter's name give its text;
  * /metrics counts requests per adapter (sampan:lora_requests_total{adapter});
  * an unknown model name is a 404 naming what is served; bad --lora values fail at start.
"""

import concurrent.futures
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util  # noqa: E402
import serve_util as su  # noqa: E402

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
N_TOKENS = 12
PROMPTS = ["The quick brown fox", "Return the sum of two numbers and",
           # long enough to fill prefix-cache blocks (16 tokens each by default)
           "This module provides functions for working with files and directories, paths, "
           "and the operating system, so that a program can read and write the data it needs"]


def write_adapter(path, cfg, targets, rank, alpha, seed, scale):
    import safetensors_io
    rng = np.random.default_rng(seed)
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    hd = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    shapes = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
              "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h)}
    tensors = {}
    for layer in range(cfg["num_hidden_layers"]):
        for m in targets:
            fin, fout = shapes[m]
            part = "mlp" if m in ("gate_proj", "up_proj", "down_proj") else "self_attn"
            base = f"base_model.model.model.layers.{layer}.{part}.{m}"
            tensors[base + ".lora_A.weight"] = (rng.standard_normal((rank, fin)) / np.sqrt(fin)).astype(np.float32)
            tensors[base + ".lora_B.weight"] = (scale * rng.standard_normal((fout, rank)) / np.sqrt(rank)).astype(np.float32)
    os.makedirs(path, exist_ok=True)
    safetensors_io.save_file(tensors, os.path.join(path, "adapter_model.safetensors"))
    json.dump({"peft_type": "LORA", "r": rank, "lora_alpha": alpha, "lora_dropout": 0.0,
               "target_modules": list(targets), "bias": "none", "task_type": "CAUSAL_LM",
               "base_model_name_or_path": "serve-model"},
              open(os.path.join(path, "adapter_config.json"), "w"))


def cli_text(args, model, prompt, lora=None):
    argv = ["run", "--model", model, "--prompt", prompt, "--temperature", "0", "--max-tokens",
            str(N_TOKENS), "--ignore-eos", "--threads", "2"]
    if lora:
        argv += ["--lora", lora]
    r = e2e_util.run_sampan(args, argv)
    # `run` ends its output with one newline of its own.
    text = r.stdout[:-1] if r.stdout.endswith("\n") else r.stdout
    return text if r.returncode == 0 else None, r


def complete(url, model, prompt):
    st, body, _ = su.http_json("POST", url + "/v1/completions",
                               {"model": model, "prompt": prompt, "max_tokens": N_TOKENS,
                                "temperature": 0, "ignore_eos": True})
    if st != 200:
        return None, f"{st} {body}"
    return body["choices"][0]["text"], body.get("model")


def main():
    args = e2e_util.parse_args(__doc__.split("\n")[0])
    res = e2e_util.Results()
    e2e_util.require_binary(args, res)
    model = su.make_serve_model(args)
    cfg = json.load(open(os.path.join(model, "config.json")))
    work = os.path.join(args.work_dir, "serve_lora")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ad_all = os.path.join(work, "all")
    ad_qv = os.path.join(work, "qv")
    write_adapter(ad_all, cfg, MODULES, 4, 8, seed=1, scale=1.0)
    write_adapter(ad_qv, cfg, ("q_proj", "v_proj"), 8, 32, seed=2, scale=1.0)
    adapters = {"all": ad_all, "qv": ad_qv}

    # References: the single-sequence CLI, one process per (model, adapter, prompt).
    ref = {}
    for name, lora in [("serve-model", None), ("all", ad_all), ("qv", ad_qv)]:
        for p in PROMPTS:
            text, r = cli_text(args, model, p, lora)
            if not res.check(f"sampan run {name}: {p[:20]!r}", text is not None, r.describe()):
                res.finish()
            ref[(name, p)] = text
    res.check("the adapters change the text",
              all(ref[("all", p)] != ref[("serve-model", p)] for p in PROMPTS) and
              any(ref[("qv", p)] != ref[("serve-model", p)] for p in PROMPTS),
              json.dumps({k[0]: v for k, v in ref.items() if k[1] == PROMPTS[0]}))

    # "all" by its directory's name (--lora DIR), "qv" by NAME=DIR.
    srv = su.Server(args, model, ["--lora", ad_all, "--lora", f"qv={ad_qv}", "--threads", "2"])
    with srv:
        srv.wait_ready()
        url = srv.http_url
        st, body, _ = su.http_json("GET", url + "/v1/models")
        ids = [(m.get("id"), m.get("parent")) for m in body.get("data", [])] if st == 200 else []
        res.check("/v1/models lists base and adapters",
                  ids == [("serve-model", None), ("all", "serve-model"), ("qv", "serve-model")],
                  str(ids))

        # The base's long prompt first, so its blocks are cached before the adapters ask.
        for name in ("serve-model", "all", "qv"):
            for p in PROMPTS[::-1]:
                text, echoed = complete(url, name, p)
                res.check(f"{name} alone == sampan run: {p[:20]!r}", text == ref[(name, p)],
                          f"{text!r} vs {ref[(name, p)]!r}")
                res.check(f"{name}: response names the model", echoed == name, str(echoed))

        # All at once: 3 models x 3 prompts x 2 copies in flight together.
        jobs = [(name, p) for name in ("serve-model", "all", "qv") for p in PROMPTS] * 2
        with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
            outs = list(pool.map(lambda j: complete(url, j[0], j[1])[0], jobs))
        bad = [f"{j[0]} {j[1][:15]!r}: {o!r}" for j, o in zip(jobs, outs) if o != ref[j]]
        res.check(f"{len(jobs)} concurrent requests of 3 models == each alone", not bad,
                  "; ".join(bad[:3]))

        # KServe v2 REST with an adapter's name.
        st, body, _ = su.http_json("POST", url + "/v2/models/qv/infer", {
            "parameters": {"temperature": 0, "max_tokens": N_TOKENS, "ignore_eos": True},
            "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1],
                        "data": [PROMPTS[0]]}]})
        text = None
        if st == 200:
            outs = {o["name"]: o for o in body.get("outputs", [])}
            text = outs.get("text_output", {}).get("data", [None])[0]
        res.check("KServe infer on adapter 'qv' == sampan run --lora", text == ref[("qv", PROMPTS[0])],
                  f"{st} {text!r} vs {ref[('qv', PROMPTS[0])]!r}" if text != ref[("qv", PROMPTS[0])] else "")

        # KServe v2 gRPC ModelInfer (tritonclient) with an adapter's name: its text, and the
        # response names the adapter.
        try:
            import tritonclient.grpc as tc
            c = tc.InferenceServerClient(srv.grpc_addr)
            ins = []
            for name, shape, dt, val in (("text_input", [1], "BYTES", np.array([PROMPTS[2].encode()], dtype=np.object_)),
                                         ("max_tokens", [1], "INT32", np.array([N_TOKENS], dtype=np.int32)),
                                         ("sampling_parameters", [1], "BYTES",
                                          np.array([json.dumps({"temperature": 0, "ignore_eos": True}).encode()],
                                                   dtype=np.object_))):
                t = tc.InferInput(name, shape, dt)
                t.set_data_from_numpy(val)
                ins.append(t)
            r = c.infer("qv", ins)
            ktext = r.as_numpy("text_output")[0].decode()
            kname = r.get_response().model_name
            c.close()
        except Exception as e:  # a failed call is a failed check
            ktext, kname = f"error: {e}", None
        res.check("KServe gRPC ModelInfer on adapter 'qv' == sampan run --lora, named 'qv'",
                  ktext == ref[("qv", PROMPTS[2])] and kname == "qv",
                  f"{kname} {ktext!r} vs {ref[('qv', PROMPTS[2])]!r}")

        # gRPC Generate with an adapter's name.
        try:
            m = su.proto_message_classes(args, ["proto/sampan_generate.proto"],
                                         ["sampan.v1.GenerateRequest", "sampan.v1.GenerateResponse"],
                                         "sampan_generate")
            import grpc
            ch = grpc.insecure_channel(srv.grpc_addr)
            call = ch.unary_stream("/sampan.v1.Generate/Generate",
                                   request_serializer=m["sampan.v1.GenerateRequest"].SerializeToString,
                                   response_deserializer=m["sampan.v1.GenerateResponse"].FromString)
            req = m["sampan.v1.GenerateRequest"](model="all", text=PROMPTS[1], temperature=0,
                                                 max_tokens=N_TOKENS, ignore_eos=True)
            gtext = "".join(r.text for r in call(req, timeout=120))
            ch.close()
        except Exception as e:  # a failure to connect or decode is a failed check, not a crash
            gtext = f"error: {e}"
        res.check("gRPC Generate on adapter 'all' == sampan run --lora", gtext == ref[("all", PROMPTS[1])],
                  f"{gtext!r} vs {ref[('all', PROMPTS[1])]!r}")

        st, body, _ = su.http_json("POST", url + "/v1/completions",
                                   {"model": "nope", "prompt": "hi", "max_tokens": 2})
        msg = json.dumps(body)
        res.check("unknown model: 404 naming the served models",
                  st == 404 and "'serve-model', 'all', 'qv'" in msg, f"{st} {msg}")

        m = su.metrics(url)
        # Per adapter: 3 alone + 6 concurrent, plus KServe REST and gRPC (qv) and Generate (all).
        got = {a: su.metric_value(m, "sampan:lora_requests_total", adapter=a) for a in adapters}
        res.check("sampan:lora_requests_total per adapter", got == {"all": 10, "qv": 11}, str(got))

    # Bad --lora values: non-zero exit, one error line.
    for name, extra, needle in [
            ("--lora with an empty name", ["--lora", f"={ad_all}"], "NAME=DIR"),
            ("--lora name twice", ["--lora", f"x={ad_all}", "--lora", f"x={ad_qv}"], "twice"),
            ("--lora named like the base", ["--lora", f"serve-model={ad_all}"], "served name"),
            ("--lora missing directory", ["--lora", f"x={work}/none"], f"{work}/none")]:
        r = e2e_util.run_sampan(args, ["serve", "--model", model, "--http-port", "0",
                                       "--grpc-port", "-1"] + extra, timeout=120)
        last = r.last_stderr_line()
        res.check(name, r.returncode not in (0, None) and "error" in last and needle in last,
                  last if r.returncode else r.describe())
    res.finish()


if __name__ == "__main__":
    main()
