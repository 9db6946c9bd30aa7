#!/usr/bin/env python3
"""/v1/completions batches, echo with prompt logprobs, and best_of, against references.

What lm-evaluation-harness's `local-completions` model sends for its loglikelihood tasks (a
batch of token-id prompts, echo, logprobs, max_tokens 0 or 1) and what the legacy API's best_of
does. Checks:
  * echo + logprobs: every prompt token after the first is scored with numpy's float64
    log_softmax of the reference forward (tests/reference/numpy_llama.py) at the position before
    it (within 0.02, as test_generate's decode logprobs), its top alternatives too, the first
    token unscored (null); the text is the prompt's; max_tokens 0 returns the prompt alone;
    token texts (in context: a SentencePiece word keeps its space) add up to the text and
    text_offset points at each;
  * the prompt is scored whole although the prefix cache holds it, and in chunks of a small
    --max-batched-tokens;
  * a batch of prompts (strings and id lists) gives each prompt's choices in order, equal to
    the prompts sent one by one (greedy text exactly, prompt logprobs within 1e-3), usage
    counting each prompt once; streamed echo equals the whole response;
  * best_of > n returns the n choices of highest mean token logprob among the best_of that
    n = best_of with the same seed generates (choice i seeded seed + i), in that order;
  * gRPC Generate's prompt_logprobs give the same scores on its first response;
  * vLLM's prompt_logprobs field: each completion choice's (chat: the response's) list, null
    first, then per prompt token {id: {logprob, rank, decoded_token}} for the token and its top
    alternatives, logprobs and ranks against numpy's (the chat prompt rendered by jinja2),
    decoded tokens adding up to the prompt, beside echo's own logprobs in one request; refused
    out of range, of the wrong type and streamed;
  * refusals: best_of below n or streamed, a batch over 128 choices, max_tokens 0 without echo,
    an empty prompt in a batch.
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util  # noqa: E402
import serve_util as su  # noqa: E402

LOGPROB_TOL = 0.02  # float32 engine vs float64 numpy on this model (test_generate.py's bound)
BATCH_TOL = 1e-3    # the same prompt alone and in a batch (other GEMM shapes)
PROMPTS = ["The quick brown fox jumps over the lazy dog, and then the cat sat on the mat while",
           "Return the sum of two numbers",
           "This module provides functions for working with files and directories, paths, and"]


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def post(url, body):
    return su.http_json("POST", url + "/v1/completions", body, timeout=300)


def check_refusal(res, url, name, body, field):
    st, b, _ = post(url, body)
    param = b.get("error", {}).get("param") if isinstance(b, dict) else None
    res.check(f"refused: {name}", st == 400 and param == field, f"{st} {json.dumps(b)[:200]}")


def prompt_lp_errors(plp, ids, lsm, n_alt):
    """What is wrong with vLLM-style prompt_logprobs `plp` for prompt `ids` (lsm: numpy's
    float64 log_softmax per position): the first entry null, then for token t its own entry
    (logprob and rank against numpy's within LOGPROB_TOL) and n_alt alternatives ranked 1..n_alt
    whose logprobs are numpy's best."""
    if not isinstance(plp, list) or len(plp) != len(ids) or plp[0] is not None:
        return f"not a list of {len(ids)} entries with a null first: {str(plp)[:200]}"
    for t in range(1, len(ids)):
        e, row = plp[t], lsm[t - 1]
        own = e.get(str(ids[t])) if isinstance(e, dict) else None
        if own is None:
            return f"token {t}: no entry for its id {ids[t]}: {e}"
        want = row[ids[t]]
        lo = 1 + int((row > want + LOGPROB_TOL).sum())
        hi = 1 + int((row > want - LOGPROB_TOL).sum())
        if abs(own["logprob"] - want) > LOGPROB_TOL or not lo <= own["rank"] <= hi:
            return f"token {t}: {own} vs numpy logprob {want:.4f}, rank in [{lo}, {hi}]"
        alts = sorted((v["rank"], v["logprob"], int(k)) for k, v in e.items() if k != str(ids[t]))
        ranks = sorted([v["rank"] for k, v in e.items() if k != str(ids[t])] +
                       ([own["rank"]] if own["rank"] <= n_alt else []))
        best = np.sort(row)[::-1]
        if ranks[:n_alt] != list(range(1, n_alt + 1)) or len(e) > n_alt + 1:
            return f"token {t}: ranks {ranks} for {n_alt} alternatives: {e}"
        for r, lp, i in alts:
            if abs(lp - best[r - 1]) > LOGPROB_TOL or abs(lp - row[i]) > LOGPROB_TOL:
                return f"token {t}: alternative {i} rank {r} logprob {lp} vs numpy {row[i]:.4f}"
    return None


def check_prompt_logprobs(res, url, tok, ids, lsm, alone, model, ref):
    st, b, _ = post(url, {"prompt": ids[2], "prompt_logprobs": 2, "max_tokens": 2,
                          "temperature": 0, "n": 2})
    ok = st == 200 and len(b["choices"]) == 2
    res.check("prompt_logprobs 2, n 2: 200", ok, json.dumps(b)[:300])
    if ok:
        for c in b["choices"]:
            err = prompt_lp_errors(c.get("prompt_logprobs"), ids[2], lsm[2], 2)
            res.check(f"prompt_logprobs, choice {c['index']}: vLLM's entries == numpy", err is None,
                      err or "")
        plp = b["choices"][0]["prompt_logprobs"]
        if isinstance(plp, list) and len(plp) == len(ids[2]):
            names = [plp[t].get(str(ids[2][t]), {}).get("decoded_token", "")
                     for t in range(1, len(ids[2]))]
            full = tok.decode(ids[2], skip_special_tokens=False)
            first = tok.decode(ids[2][:1], skip_special_tokens=False)
            res.check("prompt_logprobs: decoded tokens add up to the prompt's text",
                      first + "".join(names) == full, f"{names} vs {full!r}")
            a = alone[2]["logprobs"]["token_logprobs"] if len(alone) > 2 else []
            worst = max([abs(plp[t][str(ids[2][t])]["logprob"] - a[t])
                         for t in range(1, len(ids[2]))] if len(a) == len(ids[2])
                        else [float("inf")])
            res.check(f"prompt_logprobs == echo's logprobs (within {BATCH_TOL})",
                      worst <= BATCH_TOL, f"max diff {worst:.3g}")
    # A batch with echo: echo's alternatives (1) and prompt_logprobs' (3) each as asked.
    st, b, _ = post(url, {"prompt": ids[:2], "prompt_logprobs": 3, "echo": True, "logprobs": 1,
                          "max_tokens": 1, "temperature": 0})
    ok = st == 200 and [c["index"] for c in b["choices"]] == [0, 1]
    if res.check("batch, echo logprobs 1 and prompt_logprobs 3: 200", ok, json.dumps(b)[:300]):
        errs = [prompt_lp_errors(c.get("prompt_logprobs"), ids[k], lsm[k], 3)
                for k, c in enumerate(b["choices"])]
        res.check("batch: each prompt's prompt_logprobs == numpy", errs == [None, None], str(errs))
        sizes = {len(d) for c in b["choices"] for d in c["logprobs"]["top_logprobs"][1:]}
        res.check("batch: echo keeps its own 1 alternative (dicts of 1 or 2)",
                  sizes <= {1, 2}, str(sizes))
    # Chat: the rendered prompt's scores at the top level (jinja2 renders the template).
    import jinja2
    cfg = json.load(open(os.path.join(model, "tokenizer_config.json")))
    msgs = [{"role": "user", "content": "Return the sum of two numbers"}]
    text = jinja2.Environment().from_string(cfg["chat_template"]).render(
        messages=msgs, bos_token=cfg["bos_token"], add_generation_prompt=True)
    chat_ids = tok.encode(text, add_special_tokens=False).ids
    st, b, _ = su.http_json("POST", url + "/v1/chat/completions",
                            {"messages": msgs, "prompt_logprobs": 1, "max_tokens": 1, "n": 2},
                            timeout=300)
    ok = st == 200 and all("prompt_logprobs" not in c for c in b["choices"])
    if res.check("chat prompt_logprobs 1: 200, at the top level only", ok, json.dumps(b)[:300]):
        err = prompt_lp_errors(b.get("prompt_logprobs"), chat_ids,
                               log_softmax(ref.logits(model, chat_ids)), 1)
        res.check("chat prompt_logprobs == numpy on the rendered prompt", err is None, err or "")
    # Refusals: out of range, a string, with stream.
    check_refusal(res, url, "prompt_logprobs 21", {"prompt": "a", "prompt_logprobs": 21},
                  "prompt_logprobs")
    check_refusal(res, url, "prompt_logprobs -1", {"prompt": "a", "prompt_logprobs": -1},
                  "prompt_logprobs")
    check_refusal(res, url, "prompt_logprobs a string", {"prompt": "a", "prompt_logprobs": "2"},
                  "prompt_logprobs")
    check_refusal(res, url, "prompt_logprobs streamed",
                  {"prompt": "a", "prompt_logprobs": 1, "stream": True}, "prompt_logprobs")
    st, b, _ = su.http_json("POST", url + "/v1/chat/completions",
                            {"messages": msgs, "prompt_logprobs": 1, "stream": True})
    param = b.get("error", {}).get("param") if isinstance(b, dict) else None
    res.check("refused: chat prompt_logprobs streamed", st == 400 and param == "prompt_logprobs",
              f"{st} {json.dumps(b)[:200]}")


def main():
    args = e2e_util.parse_args(__doc__.split("\n")[0])
    res = e2e_util.Results()
    e2e_util.require_binary(args, res)
    sys.path.insert(0, os.path.join(args.source_dir, "tests", "reference"))
    import numpy_llama as ref
    from tokenizers import Tokenizer

    model = su.make_serve_model(args)
    tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    ids = [tok.encode(p).ids for p in PROMPTS]  # BOS first, as the server encodes text
    res.check("prompts tokenize to several tokens", all(len(i) >= 6 for i in ids),
              str([len(i) for i in ids]))
    lsm = [log_softmax(ref.logits(model, i)) for i in ids]

    # Chunked prefill of 8 tokens: every prompt is scored over several steps.
    srv = su.Server(args, model, ["--threads", "2", "--max-batched-tokens", "8"])
    with srv:
        srv.wait_ready()
        url = srv.http_url

        # Cache the first prompt's blocks (a full block of 16 at least); its echo must still
        # score every token.
        post(url, {"prompt": PROMPTS[0], "max_tokens": 1})
        st, b, _ = post(url, {"prompt": PROMPTS[0], "max_tokens": 1})
        cached = b["usage"]["prompt_tokens_details"]["cached_tokens"] if st == 200 else 0
        res.check("the prefix cache holds the first prompt", cached >= 16, f"{st} {cached}")

        alone = []
        for k, p in enumerate(PROMPTS):
            st, b, _ = post(url, {"prompt": ids[k], "echo": True, "logprobs": 3,
                                  "max_tokens": 0})
            if not res.check(f"echo max_tokens 0, prompt {k}: 200", st == 200,
                             json.dumps(b)[:300]):
                continue
            c = b["choices"][0]
            lp = c["logprobs"]
            alone.append(c)
            n = len(ids[k])
            res.check(f"prompt {k}: one entry per prompt token, the text is the prompt",
                      len(lp["tokens"]) == n and len(lp["token_logprobs"]) == n and
                      len(lp["top_logprobs"]) == n and len(lp["text_offset"]) == n and
                      c["text"] == tok.decode(ids[k], skip_special_tokens=False) and
                      c["finish_reason"] == "length",
                      f"{len(lp['tokens'])} vs {n}; {c['text']!r}")
            res.check(f"prompt {k}: first token unscored",
                      lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None)
            # Token texts in context (a SentencePiece word keeps its space): they add up to the
            # text, and each text_offset points at its token.
            res.check(f"prompt {k}: tokens add up to the text, offsets point at them",
                      "".join(lp["tokens"]) == c["text"] and
                      all(c["text"][o:].startswith(t)
                          for o, t in zip(lp["text_offset"], lp["tokens"])),
                      f"{lp['tokens']} {lp['text_offset']}")
            want = [lsm[k][t - 1][ids[k][t]] for t in range(1, n)]
            got = lp["token_logprobs"][1:]
            diff = max((abs(g - w) if g is not None else float("inf"))
                       for g, w in zip(got, want)) if got else float("inf")
            res.check(f"prompt {k}: logprobs == numpy log_softmax (within {LOGPROB_TOL})",
                      len(got) == n - 1 and diff <= LOGPROB_TOL, f"max diff {diff:.4g}")
            # The top alternatives: 3 of them plus the token itself when it is not among them.
            worst = 0.0
            for t in range(1, n):
                if lp["top_logprobs"][t] is None:
                    worst = float("inf")
                    break
                top = sorted(lp["top_logprobs"][t].values(), reverse=True)
                ref_top = np.sort(lsm[k][t - 1])[::-1][:3]
                worst = max(worst, float(np.abs(np.array(top[:3]) - ref_top).max()))
            res.check(f"prompt {k}: top-3 logprobs == numpy's (within {LOGPROB_TOL})",
                      worst <= LOGPROB_TOL, f"max diff {worst:.4g}")
            res.check(f"prompt {k}: usage counts the prompt, no completion tokens",
                      b["usage"]["prompt_tokens"] == n and b["usage"]["completion_tokens"] == 0,
                      str(b["usage"]))

        # gRPC Generate's prompt_logprobs: the same scores on the first response.
        try:
            m = su.proto_message_classes(args, ["proto/sampan_generate.proto"],
                                         ["sampan.v1.GenerateRequest",
                                          "sampan.v1.GenerateResponse"], "sampan_generate")
            import grpc
            ch = grpc.insecure_channel(srv.grpc_addr)
            call = ch.unary_stream(
                "/sampan.v1.Generate/Generate",
                request_serializer=m["sampan.v1.GenerateRequest"].SerializeToString,
                response_deserializer=m["sampan.v1.GenerateResponse"].FromString)
            req = m["sampan.v1.GenerateRequest"](token_ids={"ids": ids[2]}, prompt_logprobs=2,
                                                 max_tokens=2, temperature=0)
            resps = list(call(req, timeout=120))
            bad = m["sampan.v1.GenerateRequest"](text="a", prompt_logprobs=21)
            try:
                list(call(bad, timeout=60))
                refused = "accepted"
            except grpc.RpcError as e:
                refused = f"{e.code().name} {e.details()}"
            ch.close()
            first = resps[0].prompt_logprobs
            n = len(ids[2])
            diff = max(abs(first[t - 1].logprob - lsm[2][t - 1][ids[2][t]])
                       for t in range(1, n)) if len(first) == n - 1 else float("inf")
            ok = len(first) == n - 1 and all(len(r.prompt_logprobs) == 0 for r in resps[1:]) \
                and [p.token_id for p in first] == ids[2][1:] and \
                all(len(p.top) == 2 for p in first) and diff <= LOGPROB_TOL
            detail = f"{len(first)} entries for {n} tokens, max diff {diff:.3g}"
        except Exception as e:  # a failure to connect or decode is a failed check
            ok, detail, refused = False, f"error: {e}", ""
        res.check("gRPC Generate prompt_logprobs == numpy on the first response", ok, detail)
        res.check("gRPC Generate prompt_logprobs 21: INVALID_ARGUMENT naming it",
                  refused.startswith("INVALID_ARGUMENT") and "prompt_logprobs" in refused,
                  refused)

        # vLLM's prompt_logprobs field, on completions (each choice) and chat (top level).
        check_prompt_logprobs(res, url, tok, ids, lsm, alone, model, ref)

        # lm-eval's request: a batch of id lists, echo, logprobs 1, max_tokens 1, greedy.
        st, b, _ = post(url, {"prompt": ids, "echo": True, "logprobs": 1, "max_tokens": 1,
                              "temperature": 0})
        ok = st == 200 and len(b["choices"]) == len(ids)
        res.check("batch of id prompts with echo: one choice each", ok, json.dumps(b)[:300])
        if ok and len(alone) == len(ids):
            worst, shape_ok = 0.0, True
            for k, c in enumerate(b["choices"]):
                lp = c["logprobs"]["token_logprobs"]
                shape_ok &= c["index"] == k and len(lp) == len(ids[k]) + 1 and lp[0] is None
                a = alone[k]["logprobs"]["token_logprobs"]
                worst = max([worst] + [abs(x - y) if x is not None and y is not None
                                       else float("inf")
                                       for x, y in zip(lp[1:len(ids[k])], a[1:])])
            res.check("batch: prompt + 1 generated entry per choice, in prompt order", shape_ok)
            res.check(f"batch: prompt logprobs == each prompt alone (within {BATCH_TOL})",
                      worst <= BATCH_TOL, f"max diff {worst:.3g}")

        # A batch of strings and id lists, n = 2, greedy: the texts of each prompt alone.
        single = []
        for p in PROMPTS:
            st, b, _ = post(url, {"prompt": p, "max_tokens": 6, "temperature": 0,
                                  "ignore_eos": True})
            single.append(b["choices"][0]["text"] if st == 200 else None)
        batch = [PROMPTS[0], ids[1], PROMPTS[2]]
        st, b, _ = post(url, {"prompt": batch, "n": 2, "max_tokens": 6, "temperature": 0,
                              "ignore_eos": True})
        texts = [c["text"] for c in sorted(b["choices"], key=lambda c: c["index"])] \
            if st == 200 else []
        res.check("mixed batch, n = 2: choices 2k, 2k + 1 are prompt k's greedy text",
                  texts == [t for t in single for _ in range(2)], f"{texts} vs {single}")
        if st == 200:
            u = b["usage"]
            res.check("mixed batch: usage counts each prompt once",
                      u["prompt_tokens"] == sum(len(i) for i in ids) and
                      u["completion_tokens"] == 6 * 2 * len(batch), str(u))

        # Generated tokens' texts add up to the reply, as the prompt's do.
        st, b, _ = post(url, {"prompt": PROMPTS[2], "max_tokens": 12, "temperature": 0,
                              "ignore_eos": True, "logprobs": 2})
        c = b["choices"][0] if st == 200 else {"text": None, "logprobs": {"tokens": []}}
        res.check("generated tokens add up to the text", st == 200 and
                  "".join(c["logprobs"]["tokens"]) == c["text"],
                  f"{c['logprobs']['tokens']} vs {c['text']!r}")

        # Streamed echo == whole.
        body = {"prompt": PROMPTS[:2], "echo": True, "logprobs": 2, "max_tokens": 3,
                "temperature": 0, "ignore_eos": True}
        st, whole, _ = post(url, body)
        events = su.sse_events(url + "/v1/completions", dict(body, stream=True))
        got = {}
        for ev in events:
            if not isinstance(ev, dict):
                continue
            for c in ev.get("choices", []):
                g = got.setdefault(c["index"], {"text": "", "tokens": [], "lps": []})
                g["text"] += c["text"]
                if c.get("logprobs"):
                    g["tokens"] += c["logprobs"]["tokens"]
                    g["lps"] += c["logprobs"]["token_logprobs"]
        ok = st == 200 and all(
            got.get(c["index"], {}).get("text") == c["text"] and
            got[c["index"]]["tokens"] == c["logprobs"]["tokens"] and
            got[c["index"]]["lps"] == c["logprobs"]["token_logprobs"]
            for c in whole["choices"])
        res.check("streamed echo with logprobs == whole response", ok,
                  f"{json.dumps(got)[:300]} vs {json.dumps(whole)[:300]}")

        # best_of: the best n by mean token logprob of the best_of seeded choices.
        common = {"prompt": PROMPTS[1], "max_tokens": 5, "temperature": 1.0, "seed": 11,
                  "ignore_eos": True, "logprobs": 0}
        st1, all4, _ = post(url, dict(common, n=4))
        st2, best, _ = post(url, dict(common, n=2, best_of=4))
        if res.check("n = 4 and best_of = 4, n = 2: 200", st1 == 200 and st2 == 200,
                     f"{st1} {st2}"):
            cands = sorted(all4["choices"], key=lambda c: c["index"])
            means = [float(np.mean(c["logprobs"]["token_logprobs"])) for c in cands]
            order = sorted(range(4), key=lambda i: -means[i])[:2]
            want = [cands[i]["text"] for i in order]
            got_b = [c["text"] for c in sorted(best["choices"], key=lambda c: c["index"])]
            res.check("best_of 4, n 2: the two of highest mean logprob, best first",
                      got_b == want and len(set(c["text"] for c in cands)) > 1,
                      f"{got_b} vs {want} (means {means})")
            res.check("best_of: usage counts every generated choice",
                      best["usage"]["completion_tokens"] == 4 * 5, str(best["usage"]))

        # The openai client reads the batch, the nulls and the logprobs as it reads OpenAI's.
        import openai
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
        try:
            r = client.completions.create(model="serve-model", prompt=ids[:2], echo=True,
                                          logprobs=1, max_tokens=1, temperature=0)
            lps = [c.logprobs.token_logprobs for c in r.choices]
            ok = [c.index for c in r.choices] == [0, 1] and \
                all(lp[0] is None and len(lp) == len(ids[k]) + 1 for k, lp in enumerate(lps)) and \
                all(abs(lp[t] - alone[k]["logprobs"]["token_logprobs"][t]) <= BATCH_TOL
                    for k, lp in enumerate(lps) for t in range(1, len(ids[k])))
            detail = str(lps)[:300]
        except Exception as e:  # a client that cannot parse the reply is a failed check
            ok, detail = False, f"error: {e}"
        res.check("openai client: batch of id prompts, echo, logprobs", ok, detail)

        check_refusal(res, url, "best_of below n", {"prompt": "a", "n": 3, "best_of": 2},
                      "best_of")
        check_refusal(res, url, "best_of above n streamed",
                      {"prompt": "a", "n": 1, "best_of": 2, "stream": True}, "best_of")
        check_refusal(res, url, "65 prompts x best_of 2 > 128",
                      {"prompt": ["a"] * 65, "best_of": 2}, "prompt")
        check_refusal(res, url, "max_tokens 0 without echo", {"prompt": "a", "max_tokens": 0},
                      "max_tokens")
        check_refusal(res, url, "an empty prompt in a batch", {"prompt": ["a", ""]}, "prompt")
        check_refusal(res, url, "a batch mixing prompts and ids", {"prompt": ["a", 5]}, "prompt")
        st, _, _ = su.http_json("GET", url + "/health")
        res.check("server healthy after all of it", st == 200, str(st))
    res.finish()


if __name__ == "__main__":
    main()
