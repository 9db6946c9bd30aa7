#!/usr/bin/env python3
"""End-to-end: the HTTP API of `sampan serve` with real clients.

OpenAI-compatible routes through the `openai` package (completion, chat, streaming, usage,
include_usage, logprobs), KServe v2 REST through urllib, and the bad-input list: each refusal is
a 4xx with a JSON error body naming the field, and the server keeps serving (a good request
follows every bad one).
"""
import json
import math

import jsonschema
import os
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_util import Results, parse_args, require_binary, run_sampan  # noqa: E402
from serve_util import (Server, http_json, make_serve_model, metrics, metric_value,  # noqa: E402
                        sse_events, sse_text)

PROMPT = "The quick brown fox"
# Every value bounded (string lengths, digits, list sizes), so that replies end.
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"},
    "color": {"enum": ["red", "green", "blue"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2}},
    "required": ["name", "age", "color"], "additionalProperties": False}

# OpenAI strict mode's string, number and array keywords; short, to end within the model's
# 96 positions.
STRICT_SCHEMA = {"type": "object", "properties": {
    "c": {"type": "string", "pattern": "^[A-Z][0-9]$"},
    "d": {"type": "string", "format": "date"},
    "s": {"type": "integer", "minimum": -5, "exclusiveMaximum": 40, "multipleOf": 3},
    "f": {"type": "number", "minimum": 0, "maximum": 1},
    "p": {"type": "array", "prefixItems": [{"type": "boolean"}, {"enum": [1, 2]}],
          "items": False, "minItems": 2},
    "o": {"oneOf": [{"type": "null"}, {"type": "string", "pattern": "^[a-z]{1,2}$"}]}},
    "required": ["c", "d", "s", "f", "p", "o"], "additionalProperties": False}


def valid_against(text, schema):
    """Python's jsonschema on `text` (the independent reference)."""
    try:
        jsonschema.validate(json.loads(text), schema)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False
# Short, so the test stays quick on the Sanitize build; long enough to cross several tokens.
MAX_TOKENS = 12
MAX_MODEL_LEN = 96
GREEDY = {"temperature": 0}


def comp_url_for(base):
    return base + "/v1/completions"


def check_error_body(res, name, status, body, want_status, want_param):
    """A refusal: the status, an OpenAI-shape error body, and the field it names."""
    ok = status == want_status and isinstance(body, dict) and isinstance(body.get("error"), dict)
    err = body.get("error", {}) if isinstance(body, dict) else {}
    if ok and want_param is not None:
        # No field at fault: OpenAI writes param null.
        ok = (err.get("param") or "") == want_param
        if want_param:
            ok = ok and want_param.split(".")[-1].split("[")[0] in err.get("message", "")
    res.check(name, ok, f"status {status}, body {str(body)[:300]}")


def main():
    args = parse_args(__doc__.split("\n")[0])
    res = Results()
    require_binary(args, res)
    import openai

    model_dir = make_serve_model(args)
    # --tool-call-parser llama3_json: a reply that is {"name": ..., "parameters": ...} is a call.
    with Server(args, model_dir, ["--max-model-len", str(MAX_MODEL_LEN),
                                  "--default-max-tokens", "8",
                                  "--tool-call-parser", "llama3_json"]) as srv:
        base = srv.http_url
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0,
                               timeout=120)

        # ---- model list and health ----
        models = client.models.list()
        names = [m.id for m in models.data]
        res.check("GET /v1/models lists the one model", len(names) == 1, str(names))
        name = names[0] if names else "serve-model"
        st, body, _ = http_json("GET", base + "/v1/models")
        res.check("/v1/models shape", st == 200 and body.get("object") == "list"
                  and body["data"][0].get("object") == "model", str(body))
        st, body, _ = http_json("GET", base + "/health")
        res.check("GET /health 200 when ready", st == 200, f"{st} {body}")

        # ---- completion, non-stream and stream ----
        comp = client.completions.create(model=name, prompt=PROMPT, max_tokens=MAX_TOKENS,
                                         **GREEDY)
        text = comp.choices[0].text
        res.check("completion shape", comp.object == "text_completion"
                  and comp.id.startswith("cmpl-") and comp.model == name
                  and comp.choices[0].index == 0
                  and comp.choices[0].finish_reason in ("stop", "length"), str(comp)[:400])
        ids = run_sampan(args, ["tokenize", "--model", model_dir, "--text", PROMPT,
                                "--add-special"]).stdout.split()
        u = comp.usage
        res.check("completion usage: prompt tokens equal `sampan tokenize` count",
                  u.prompt_tokens == len(ids), f"{u.prompt_tokens} vs {len(ids)}")
        res.check("completion usage: totals add up", u.total_tokens ==
                  u.prompt_tokens + u.completion_tokens and 1 <= u.completion_tokens <= MAX_TOKENS,
                  str(u))
        res.check("completion usage: finish length iff max_tokens reached",
                  (comp.choices[0].finish_reason == "length") == (u.completion_tokens == MAX_TOKENS),
                  f"{comp.choices[0].finish_reason} {u.completion_tokens}")
        details = getattr(u, "prompt_tokens_details", None)
        res.check("completion usage: prompt_tokens_details.cached_tokens",
                  details is not None and details.cached_tokens is not None
                  and 0 <= details.cached_tokens <= u.prompt_tokens, str(details))
        comp2 = client.completions.create(model=name, prompt=PROMPT, max_tokens=MAX_TOKENS,
                                          **GREEDY)
        res.check("greedy completion is deterministic", comp2.choices[0].text == text,
                  f"{comp2.choices[0].text!r} vs {text!r}")

        chunks = list(client.completions.create(model=name, prompt=PROMPT, max_tokens=MAX_TOKENS,
                                                stream=True, **GREEDY))
        stream_text = "".join(c.choices[0].text for c in chunks if c.choices)
        res.check("streamed completion text == non-stream text", stream_text == text,
                  f"{stream_text!r} vs {text!r}")
        finals = [c.choices[0].finish_reason for c in chunks if c.choices
                  and c.choices[0].finish_reason]
        res.check("stream: one final chunk with finish_reason",
                  finals == [comp.choices[0].finish_reason], str(finals))

        # include_usage, read raw to see the SSE framing and [DONE].
        events = sse_events(base + "/v1/completions",
                            {"model": name, "prompt": PROMPT, "max_tokens": MAX_TOKENS,
                             "stream": True, "stream_options": {"include_usage": True}, **GREEDY})
        res.check("stream ends with [DONE]", events and events[-1] == "[DONE]", str(events[-2:]))
        usage_ev = events[-2] if len(events) >= 2 and isinstance(events[-2], dict) else {}
        res.check("include_usage: a last chunk with empty choices and usage",
                  usage_ev.get("choices") == [] and usage_ev.get("usage", {}).get("total_tokens")
                  == u.total_tokens, str(usage_ev))
        res.check("include_usage: text unchanged", sse_text(events) == text)

        # prompt as token ids gives the same result as the text it encodes.
        comp_ids = client.completions.create(model=name, prompt=[int(i) for i in ids],
                                             max_tokens=MAX_TOKENS, **GREEDY)
        res.check("prompt as token ids == prompt as text", comp_ids.choices[0].text == text,
                  f"{comp_ids.choices[0].text!r}")

        # default max_tokens (--default-max-tokens 8)
        # ignore_eos: the default (8) is then reached exactly.
        comp_def = client.completions.create(model=name, prompt=PROMPT,
                                             extra_body={"ignore_eos": True}, **GREEDY)
        res.check("default max_tokens from --default-max-tokens",
                  comp_def.usage.completion_tokens == 8, str(comp_def.usage))

        # A max_tokens beyond the context is capped to it (the engine stops there anyway).
        big = client.completions.create(model=name, prompt=PROMPT, max_tokens=10000,
                                        extra_body={"ignore_eos": True}, **GREEDY)
        res.check("max_tokens beyond the context is capped to it",
                  big.usage.completion_tokens == MAX_MODEL_LEN - u.prompt_tokens
                  and big.choices[0].finish_reason == "length", str(big.usage))

        # Stop strings: the text ends before the stop, finish_reason "stop".
        if len(text.strip()) >= 4:
            mid = len(text) // 2
            stop = text[mid:mid + 2]
            want = text[:text.find(stop)]
            for streamed in (False, True):
                if streamed:
                    got = sse_text(sse_events(comp_url_for(base), {
                        "model": name, "prompt": PROMPT, "max_tokens": MAX_TOKENS,
                        "stop": [stop], "stream": True, **GREEDY}))
                else:
                    got = client.completions.create(model=name, prompt=PROMPT,
                                                    max_tokens=MAX_TOKENS, stop=[stop],
                                                    **GREEDY).choices[0].text
                res.check(f"stop string {stop!r} ends the text ({'stream' if streamed else 'whole'})",
                          got == want, f"{got!r} vs {want!r}")

        # ---- logprobs ----
        lp = client.completions.create(model=name, prompt=PROMPT, max_tokens=MAX_TOKENS,
                                       logprobs=3, **GREEDY).choices[0].logprobs
        n_out = u.completion_tokens
        ok = lp is not None and len(lp.tokens) == n_out and len(lp.token_logprobs) == n_out \
            and len(lp.top_logprobs) == n_out and len(lp.text_offset) == n_out
        res.check("completion logprobs: one entry per generated token", ok, str(lp)[:300])
        if ok:
            # Greedy: the chosen token is the most likely one, so its logprob is the top one.
            good = all(lp.token_logprobs[i] <= 0 and
                       lp.token_logprobs[i] >= max(lp.top_logprobs[i].values()) - 1e-4 and
                       len(lp.top_logprobs[i]) >= 1 for i in range(n_out))
            res.check("completion logprobs: greedy token has the top logprob", good,
                      str(lp.top_logprobs[:2]))

        # ---- chat ----
        messages = [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Say something about foxes."}]
        chat = client.chat.completions.create(model=name, messages=messages,
                                              max_tokens=MAX_TOKENS, logprobs=True,
                                              top_logprobs=2, **GREEDY)
        ch = chat.choices[0]
        res.check("chat shape", chat.object == "chat.completion" and chat.id.startswith(
            "chatcmpl-") and ch.message.role == "assistant" and ch.finish_reason in
            ("stop", "length") and chat.usage.total_tokens == chat.usage.prompt_tokens +
            chat.usage.completion_tokens, str(chat)[:400])
        content_lp = ch.logprobs.content if ch.logprobs else None
        res.check("chat logprobs: one entry per token, 2 alternatives, probabilities <= 1",
                  content_lp is not None and len(content_lp) == chat.usage.completion_tokens
                  and all(len(e.top_logprobs) == 2 and e.logprob <= 0 and
                          math.isfinite(e.logprob) for e in content_lp), str(ch.logprobs)[:300])
        # Content parts are the same conversation as plain strings.
        parts = [{"role": "system", "content": [{"type": "text", "text": "You are terse."}]},
                 {"role": "user", "content": [{"type": "text", "text": "Say something "},
                                              {"type": "text", "text": "about foxes."}]}]
        chat_parts = client.chat.completions.create(model=name, messages=parts,
                                                    max_completion_tokens=MAX_TOKENS, **GREEDY)
        res.check("chat content parts == string content",
                  chat_parts.choices[0].message.content == ch.message.content,
                  f"{chat_parts.choices[0].message.content!r} vs {ch.message.content!r}")
        stream = list(client.chat.completions.create(model=name, messages=messages,
                                                     max_tokens=MAX_TOKENS, stream=True,
                                                     stream_options={"include_usage": True},
                                                     **GREEDY))
        first = stream[0].choices[0].delta if stream and stream[0].choices else None
        res.check("chat stream: first chunk has role assistant",
                  first is not None and first.role == "assistant", str(stream[:1]))
        st_text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        res.check("chat stream text == non-stream text", st_text == ch.message.content,
                  f"{st_text!r} vs {ch.message.content!r}")
        res.check("chat stream: usage chunk last", stream and not stream[-1].choices and
                  stream[-1].usage.completion_tokens == chat.usage.completion_tokens,
                  str(stream[-1:]))
        res.check("chat stream: object chat.completion.chunk",
                  all(c.object == "chat.completion.chunk" for c in stream))

        # ---- KServe v2 REST ----
        st, body, _ = http_json("GET", base + "/v2/health/live")
        res.check("/v2/health/live 200", st == 200, f"{st}")
        st, body, _ = http_json("GET", base + "/v2/health/ready")
        res.check("/v2/health/ready 200", st == 200, f"{st}")
        st, body, _ = http_json("GET", base + "/v2")
        res.check("GET /v2 server metadata", st == 200 and body.get("name") == "sampan"
                  and "version" in body and isinstance(body.get("extensions"), list), str(body))
        st, body, _ = http_json("GET", f"{base}/v2/models/{name}")
        ins = {t["name"]: t for t in body.get("inputs", [])} if st == 200 else {}
        outs = {t["name"]: t for t in body.get("outputs", [])} if st == 200 else {}
        res.check("model metadata", st == 200 and body.get("name") == name
                  and body.get("platform") == "sampan"
                  and ins.get("text_input", {}).get("datatype") == "BYTES"
                  and ins.get("max_tokens", {}).get("datatype") == "INT32"
                  and outs.get("text_output", {}).get("datatype") == "BYTES", str(body))
        st, body, _ = http_json("GET", f"{base}/v2/models/{name}/ready")
        res.check("model ready 200", st == 200, f"{st} {body}")
        st, body, _ = http_json("GET", f"{base}/v2/models/nope")
        res.check("unknown model metadata 404", st == 404 and "error" in body, f"{st} {body}")
        st, body, _ = http_json("GET", f"{base}/v2/models/nope/ready")
        res.check("unknown model ready 404", st == 404, f"{st} {body}")

        infer = {"id": "req-7", "inputs": [
            {"name": "text_input", "shape": [1], "datatype": "BYTES", "data": [PROMPT]},
            {"name": "max_tokens", "shape": [1], "datatype": "INT32", "data": [MAX_TOKENS]},
            {"name": "sampling_parameters", "shape": [1], "datatype": "BYTES",
             "data": [json.dumps({"temperature": 0})]}]}
        st, body, _ = http_json("POST", f"{base}/v2/models/{name}/infer", infer)
        outs = {o["name"]: o for o in body.get("outputs", [])} if st == 200 else {}
        res.check("KServe infer: text_output == completion text", st == 200
                  and body.get("model_name") == name and body.get("id") == "req-7"
                  and outs.get("text_output", {}).get("data") == [text], str(body)[:400])
        res.check("KServe infer: output_ids INT32, one per generated token",
                  outs.get("output_ids", {}).get("datatype") == "INT32"
                  and len(outs.get("output_ids", {}).get("data", [])) == n_out, str(outs)[:300])
        infer_params = {"parameters": {"temperature": 0, "max_tokens": MAX_TOKENS}, "inputs": [
            {"name": "text_input", "shape": [1, 1], "datatype": "BYTES", "data": [[PROMPT]]}]}
        st, body, _ = http_json("POST", f"{base}/v2/models/{name}/infer", infer_params)
        res.check("KServe infer: sampling fields in 'parameters', nested data",
                  st == 200 and body["outputs"][0]["data"] == [text], str(body)[:300])

        # ---- n choices: each one is what a request of n = 1 gives (choice i seeded seed + i) ----
        sampled = dict(model=name, prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=1.0,
                       extra_body={"ignore_eos": True})
        one = [client.completions.create(seed=40 + i, **sampled) for i in range(3)]
        many = client.completions.create(n=3, seed=40, **sampled)
        got = sorted(many.choices, key=lambda c: c.index)
        res.check("n = 3: three choices indexed 0..2, each the n = 1 request of seed + i",
                  [c.index for c in got] == [0, 1, 2]
                  and [c.text for c in got] == [o.choices[0].text for o in one],
                  f"{[c.text for c in got]} vs {[o.choices[0].text for o in one]}")
        res.check("n = 3: seeded choices differ", len({c.text for c in got}) > 1,
                  str([c.text for c in got]))
        res.check("n = 3: usage counts the prompt once and every choice's tokens",
                  many.usage.prompt_tokens == one[0].usage.prompt_tokens
                  and many.usage.completion_tokens == 3 * MAX_TOKENS, str(many.usage))
        greedy_n = client.completions.create(model=name, prompt=PROMPT, max_tokens=MAX_TOKENS,
                                             n=2, **GREEDY)
        res.check("n = 2 greedy: both choices are the greedy text",
                  [c.text for c in greedy_n.choices] == [text, text],
                  str([c.text for c in greedy_n.choices]))
        events = sse_events(base + "/v1/completions", {
            "model": name, "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 1.0,
            "seed": 40, "n": 3, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}})
        by_index, finishes, usage = {}, {}, None
        for e in events[:-1]:
            d = e
            for c in d["choices"]:
                by_index[c["index"]] = by_index.get(c["index"], "") + c["text"]
                if c["finish_reason"]:
                    finishes[c["index"]] = finishes.get(c["index"], 0) + 1
            if d.get("usage"):
                usage = d["usage"]
        res.check("n = 3 stream: per-index deltas concatenate to the whole choices",
                  [by_index.get(i) for i in range(3)] == [c.text for c in got]
                  and finishes == {0: 1, 1: 1, 2: 1} and events[-1] == "[DONE]",
                  f"{by_index} {finishes}")
        res.check("n = 3 stream: one usage chunk with the summed tokens",
                  usage is not None and usage["completion_tokens"] == 3 * MAX_TOKENS
                  and events[-2].get("usage") == usage, str(usage))
        chat_n = client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "Say something."}],
            max_tokens=MAX_TOKENS, temperature=1.0, seed=7, n=2, extra_body={"ignore_eos": True})
        chat_one = [client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "Say something."}],
            max_tokens=MAX_TOKENS, temperature=1.0, seed=7 + i, extra_body={"ignore_eos": True})
            for i in range(2)]
        res.check("chat n = 2: each choice is the n = 1 request of seed + i",
                  [c.message.content for c in sorted(chat_n.choices, key=lambda c: c.index)] ==
                  [o.choices[0].message.content for o in chat_one],
                  str([c.message.content for c in chat_n.choices]))
        chat_events = sse_events(base + "/v1/chat/completions", {
            "model": name, "messages": [{"role": "user", "content": "Say something."}],
            "max_tokens": MAX_TOKENS, "temperature": 1.0, "seed": 7, "n": 2,
            "ignore_eos": True, "stream": True})
        roles, chat_text = {}, {}
        for e in chat_events[:-1]:
            for c in e["choices"]:
                if "role" in c["delta"]:
                    roles[c["index"]] = c["delta"]["role"]
                chat_text[c["index"]] = chat_text.get(c["index"], "") + c["delta"].get(
                    "content", "")
        res.check("chat n = 2 stream: a role chunk per choice, per-index text as whole",
                  roles == {0: "assistant", 1: "assistant"}
                  and [chat_text.get(i) for i in range(2)] ==
                  [o.choices[0].message.content for o in chat_one], f"{roles} {chat_text}")

        # ---- JSON mode (response_format json_object) ----
        # Every reply that ends on its own (finish "stop") must be one JSON object for Python's
        # json; replies cut by max_tokens are prefixes (checked by completing them is not
        # possible in general, so they are only counted). The tiny random model is nudged to
        # close strings and objects with a logit_bias on '"' and '}' (the constraint still
        # decides what is allowed), so most replies end.
        with open(os.path.join(model_dir, "tokenizer.json")) as f:
            tvocab = json.load(f)["model"]["vocab"]
        nudge = {str(tvocab[t]): 6 for t in ('"', "}", "▁}") if t in tvocab}
        parsed, ended, bad_json = 0, 0, []
        for seed in range(8):
            r = client.chat.completions.create(
                model=name, messages=[{"role": "user", "content": "Reply in JSON."}],
                max_tokens=64, temperature=1.0, seed=seed, logit_bias=nudge,
                response_format={"type": "json_object"})
            content = r.choices[0].message.content
            if r.choices[0].finish_reason == "stop":
                ended += 1
                try:
                    parsed += isinstance(json.loads(content), dict)
                except ValueError:
                    bad_json.append(content)
        res.check("JSON mode: every reply that stops is one JSON object (json.loads)",
                  ended >= 4 and parsed == ended and not bad_json,
                  f"{parsed} objects of {ended} stopped replies of 8; bad {bad_json[:2]}")
        st_events = sse_events(base + "/v1/chat/completions", {
            "model": name, "messages": [{"role": "user", "content": "Reply in JSON."}],
            "max_tokens": 64, "temperature": 0, "logit_bias": nudge, "stream": True,
            "response_format": {"type": "json_object"}})
        st_text = sse_text(st_events)
        whole = client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "Reply in JSON."}],
            max_tokens=64, temperature=0, logit_bias=nudge,
            response_format={"type": "json_object"})
        res.check("JSON mode: streamed text == whole text (greedy)",
                  st_text == whole.choices[0].message.content,
                  f"{st_text!r} vs {whole.choices[0].message.content!r}")

        # ---- response_format json_schema: replies validate with Python's jsonschema ----
        rf = {"type": "json_schema", "json_schema": {"name": "person", "strict": True,
                                                     "schema": SCHEMA}}
        ended, valid, bad_schema = 0, 0, []
        for seed in range(6):
            r = client.chat.completions.create(
                model=name, messages=[{"role": "user", "content": "A person as JSON."}],
                max_tokens=80, temperature=1.0, seed=seed, response_format=rf)
            content = r.choices[0].message.content
            if r.choices[0].finish_reason == "stop":
                ended += 1
                try:
                    jsonschema.validate(json.loads(content), SCHEMA)
                    valid += 1
                except (ValueError, jsonschema.ValidationError) as e:
                    bad_schema.append((content, str(e)[:160]))
        res.check("json_schema: every reply that stops validates against the schema (jsonschema)",
                  ended >= 4 and valid == ended,
                  f"{valid} valid of {ended} stopped of 6; bad {bad_schema[:2]}")
        two = client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "Two people."}], n=2,
            max_tokens=80, temperature=1.0, seed=11, response_format=rf)
        texts = [c.message.content for c in two.choices if c.finish_reason == "stop"]
        res.check("json_schema with n = 2: each choice validates",
                  len(texts) >= 1 and all(valid_against(t, SCHEMA) for t in texts),
                  str([c.message.content for c in two.choices]))
        # Completions take response_format too (as vLLM's extension does).
        ended, valid = 0, 0
        for seed in range(4):
            st, body, _ = http_json("POST", base + "/v1/completions", {
                "model": name, "prompt": "JSON:", "max_tokens": 80, "temperature": 1.0,
                "seed": seed, "response_format": rf})
            if st == 200 and body["choices"][0]["finish_reason"] == "stop":
                ended += 1
                valid += valid_against(body["choices"][0]["text"], SCHEMA)
        res.check("completions json_schema: every reply that stops validates (jsonschema)",
                  ended >= 3 and valid == ended, f"{valid} valid of {ended} stopped of 4")
        # pattern, format, bounds, prefixItems and oneOf, checked with jsonschema's format checker
        # (date, uuid and ipv4 need nothing beyond the standard library).
        strict_rf = {"type": "json_schema", "json_schema": {"name": "record",
                                                            "schema": STRICT_SCHEMA}}
        ended, valid, bad_schema = 0, 0, []
        for seed in range(6):
            st, body, _ = http_json("POST", base + "/v1/chat/completions", {
                "model": name, "messages": [{"role": "user", "content": "A record."}],
                "max_tokens": 80, "temperature": 1.0, "seed": seed,
                "response_format": strict_rf})
            if st == 200 and body["choices"][0]["finish_reason"] == "stop":
                ended += 1
                content = body["choices"][0]["message"]["content"]
                try:
                    jsonschema.validate(json.loads(content), STRICT_SCHEMA,
                                        format_checker=jsonschema.FormatChecker())
                    valid += 1
                except (ValueError, jsonschema.ValidationError) as e:
                    bad_schema.append((content, str(e)[:160]))
        res.check("json_schema with pattern / format / minimum / multipleOf / prefixItems / oneOf: "
                  "every reply that stops validates (jsonschema, formats checked)",
                  ended >= 3 and valid == ended,
                  f"{valid} valid of {ended} stopped of 6; bad {bad_schema[:2]}")
        st_text = sse_text(sse_events(base + "/v1/chat/completions", {
            "model": name, "messages": [{"role": "user", "content": "A person."}],
            "max_tokens": 80, "temperature": 0, "stream": True, "response_format": rf}))
        whole = client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "A person."}], max_tokens=80,
            temperature=0, response_format=rf)
        res.check("json_schema: streamed text == whole text (greedy)",
                  st_text == whole.choices[0].message.content,
                  f"{st_text!r} vs {whole.choices[0].message.content!r}")

        # ---- forced tool calls: tool_choice naming a function, and "required" ----
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
                     "type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                                      "unit": {"enum": ["c", "f"]}},
                     "required": ["city", "unit"], "additionalProperties": False}}},
                 {"type": "function", "function": {"name": "add", "parameters": {
                     "type": "object", "properties": {"a": {"type": "integer"},
                                                      "b": {"type": "integer"}},
                     "required": ["a", "b"], "additionalProperties": False}}}]
        params = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
        msgs = [{"role": "user", "content": "What is the weather in Oslo?"}]
        named = {"type": "function", "function": {"name": "get_weather"}}
        r = client.chat.completions.create(model=name, messages=msgs, tools=tools,
                                           tool_choice=named, max_tokens=80, temperature=0.7,
                                           seed=2)
        calls = r.choices[0].message.tool_calls or []
        res.check("tool_choice named: one call of that tool whose arguments validate",
                  r.choices[0].message.content is None and len(calls) == 1
                  and calls[0].function.name == "get_weather" and calls[0].type == "function"
                  and calls[0].id.startswith("call_")
                  and valid_against(calls[0].function.arguments, params["get_weather"]),
                  str(r.choices[0]))
        # The stream: the call's head (id, name) first, then its arguments piece by piece.
        events = sse_events(base + "/v1/chat/completions", {
            "model": name, "messages": msgs, "tools": tools, "tool_choice": named,
            "max_tokens": 80, "temperature": 0.7, "seed": 2, "stream": True})
        deltas = [e["choices"][0]["delta"] for e in events if isinstance(e, dict)]
        heads = [d["tool_calls"][0] for d in deltas if d.get("tool_calls")
                 and d["tool_calls"][0].get("id")]
        args_text = "".join(d["tool_calls"][0]["function"].get("arguments", "")
                            for d in deltas if d.get("tool_calls"))
        res.check("tool_choice named, streamed: one head, arguments reassemble to the whole's",
                  len(heads) == 1 and heads[0]["function"]["name"] == "get_weather"
                  and calls and args_text == calls[0].function.arguments
                  and not any(d.get("content") for d in deltas), f"{heads} {args_text!r}")
        # One call (parallel_tool_calls false) is bounded, so replies end; several calls may
        # follow one another, so there ']' is nudged to close the list.
        close_list = {str(tvocab[t]): 6 for t in ("]", "▁]") if t in tvocab}
        required_ok, required_stopped, seen_names = 0, 0, set()
        for seed in range(8):
            parallel = seed % 2 == 1
            r = client.chat.completions.create(model=name, messages=msgs, tools=tools,
                                               tool_choice="required", max_tokens=120,
                                               temperature=1.0, seed=seed,
                                               parallel_tool_calls=parallel,
                                               logit_bias=close_list if parallel else None)
            ch = r.choices[0]
            if ch.finish_reason == "tool_calls":
                required_stopped += 1
                cs = ch.message.tool_calls or []
                seen_names.update(c.function.name for c in cs)
                required_ok += bool(cs) and ch.message.content is None and all(
                    c.function.name in params
                    and valid_against(c.function.arguments, params[c.function.name])
                    for c in cs)
        res.check("tool_choice required: finish tool_calls, each call a tool's valid arguments",
                  required_stopped >= 5 and required_ok == required_stopped,
                  f"{required_ok} of {required_stopped} of 8, tools {seen_names}")
        events = sse_events(base + "/v1/chat/completions", {
            "model": name, "messages": msgs, "tools": tools, "tool_choice": "required",
            "parallel_tool_calls": False, "max_tokens": 120, "temperature": 1.0, "seed": 0,
            "stream": True})
        whole = client.chat.completions.create(model=name, messages=msgs, tools=tools,
                                               tool_choice="required", max_tokens=120,
                                               temperature=1.0, seed=0, parallel_tool_calls=False)
        st_calls = [tc for e in events if isinstance(e, dict)
                    for tc in e["choices"][0]["delta"].get("tool_calls") or []]
        fins = [e["choices"][0]["finish_reason"] for e in events if isinstance(e, dict)
                and e["choices"][0]["finish_reason"]]
        res.check("tool_choice required, streamed: the same calls as whole, finish tool_calls",
                  whole.choices[0].finish_reason == "tool_calls" and (
                      fins == ["tool_calls"] and
                      [(c["function"]["name"], c["function"]["arguments"]) for c in st_calls] ==
                      [(c.function.name, c.function.arguments)
                       for c in whole.choices[0].message.tool_calls]),
                  f"{st_calls} {fins} vs {whole.choices[0]}")

        # tool_choice auto: calls read out of the reply (--tool-call-parser llama3_json). The
        # tiny model is made to write one with a schema of Llama 3.1's call format.
        call_schema = {"type": "object", "properties": {
            "name": {"const": "get_weather"},
            "parameters": params["get_weather"]},
            "required": ["name", "parameters"], "additionalProperties": False}
        call_rf = {"type": "json_schema", "json_schema": {"name": "call", "schema": call_schema}}
        r = client.chat.completions.create(model=name, messages=msgs, tools=tools,
                                           response_format=call_rf, max_tokens=80,
                                           temperature=0.7, seed=4)
        ch = r.choices[0]
        auto_calls = ch.message.tool_calls or []
        res.check("tool_choice auto: a reply in the parser's format comes back as tool_calls",
                  ch.finish_reason == "tool_calls" and ch.message.content is None
                  and len(auto_calls) == 1 and auto_calls[0].function.name == "get_weather"
                  and valid_against(auto_calls[0].function.arguments, params["get_weather"]),
                  str(ch))
        events = sse_events(base + "/v1/chat/completions", {
            "model": name, "messages": msgs, "tools": tools, "response_format": call_rf,
            "max_tokens": 80, "temperature": 0.7, "seed": 4, "stream": True})
        deltas = [e["choices"][0] for e in events if isinstance(e, dict) and e["choices"]]
        st_calls = [tc for d in deltas for tc in d["delta"].get("tool_calls") or []]
        res.check("tool_choice auto, streamed: no call text as content, the same call at the end",
                  not any(d["delta"].get("content") for d in deltas)
                  and [d["finish_reason"] for d in deltas if d["finish_reason"]] == ["tool_calls"]
                  and [(c["function"]["name"], c["function"]["arguments"]) for c in st_calls] ==
                  [(c.function.name, c.function.arguments) for c in auto_calls],
                  f"{deltas[-2:]}")
        # Plain text stays content, streamed as whole; tool_choice none reads no calls.
        plain = client.chat.completions.create(model=name, messages=msgs, tools=tools,
                                               max_tokens=12, temperature=0)
        st_plain = sse_text(sse_events(base + "/v1/chat/completions", {
            "model": name, "messages": msgs, "tools": tools, "max_tokens": 12,
            "temperature": 0, "stream": True}))
        res.check("tool_choice auto with a text reply: content, streamed as whole",
                  plain.choices[0].message.tool_calls is None
                  and plain.choices[0].finish_reason != "tool_calls"
                  and st_plain == plain.choices[0].message.content,
                  f"{st_plain!r} vs {plain.choices[0]}")
        r = client.chat.completions.create(model=name, messages=msgs, tools=tools,
                                           tool_choice="none", response_format=call_rf,
                                           max_tokens=80, temperature=0.7, seed=4)
        res.check("tool_choice none: the same reply stays text",
                  r.choices[0].message.tool_calls is None
                  and valid_against(r.choices[0].message.content, call_schema),
                  str(r.choices[0]))

        # ---- logit_bias (OpenAI, KServe): -100 bans a token, +100 forces it ----
        def kserve_ids(sampling):
            req = {"inputs": [
                {"name": "text_input", "shape": [1], "datatype": "BYTES", "data": [PROMPT]},
                {"name": "max_tokens", "shape": [1], "datatype": "INT32", "data": [MAX_TOKENS]},
                {"name": "sampling_parameters", "shape": [1], "datatype": "BYTES",
                 "data": [json.dumps(sampling)]}]}
            st, body, _ = http_json("POST", f"{base}/v2/models/{name}/infer", req)
            if st != 200:
                return None, body
            o = {x["name"]: x for x in body["outputs"]}
            return o["output_ids"]["data"], o["text_output"]["data"][0]

        greedy_ids, _ = kserve_ids({"temperature": 0, "ignore_eos": True})
        # A word of the greedy text other than its first token (so banning and forcing differ).
        forced = next((t for t in (greedy_ids or [])[1:] if t not in (greedy_ids[0], 0, 1, 2)),
                      278)
        ids, forced_text = kserve_ids({"temperature": 0, "ignore_eos": True,
                                       "logit_bias": {str(forced): 100}})
        res.check("KServe logit_bias +100 forces the token at every step",
                  ids == [forced] * MAX_TOKENS, f"{ids} (greedy {greedy_ids})")
        ids, _ = kserve_ids({"temperature": 0, "ignore_eos": True,
                             "logit_bias": {str(greedy_ids[0]): -100} if greedy_ids else {}})
        res.check("KServe logit_bias -100 bans the greedy first token",
                  bool(ids) and bool(greedy_ids) and ids[0] != greedy_ids[0],
                  f"{ids} (greedy {greedy_ids})")
        ids, _ = kserve_ids({"temperature": 1.0, "seed": 3, "ignore_eos": True,
                             "logit_bias": {str(forced): 100}})
        res.check("KServe logit_bias +100 forces the token when sampling too",
                  ids == [forced] * MAX_TOKENS, str(ids))
        # response_format over KServe REST: in the request's parameters (an object there).
        kschema = {"type": "array", "prefixItems": [{"type": "integer", "minimum": 0,
                                                     "maximum": 9}], "items": False,
                   "minItems": 1}
        kvalid, kended = 0, 0
        for seed in range(4):
            st, body, _ = http_json("POST", f"{base}/v2/models/{name}/infer", {
                "inputs": [{"name": "text_input", "shape": [1], "datatype": "BYTES",
                            "data": [PROMPT]}],
                "parameters": {"temperature": 1.0, "seed": seed, "max_tokens": 24,
                               "response_format": {"type": "json_schema", "json_schema": {
                                   "name": "k", "schema": kschema}}}})
            if st != 200:
                continue
            out = {x["name"]: x for x in body["outputs"]}["text_output"]["data"][0]
            kended += 1
            kvalid += valid_against(out, kschema)
        res.check("KServe REST parameters.response_format json_schema: replies validate "
                  "(jsonschema)", kended == 4 and kvalid == 4, f"{kvalid} valid of {kended}")
        for streamed in (False, True):
            kw = dict(model=name, prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0,
                      logit_bias={str(forced): 100}, extra_body={"ignore_eos": True})
            if streamed:
                got = "".join(c.choices[0].text for c in
                              client.completions.create(stream=True, **kw) if c.choices)
            else:
                got = client.completions.create(**kw).choices[0].text
            res.check(f"OpenAI completions logit_bias forces the token "
                      f"({'stream' if streamed else 'whole'})", got == forced_text,
                      f"{got!r} vs {forced_text!r}")
        ch = client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "Say something."}],
            max_tokens=MAX_TOKENS, temperature=0, logit_bias={str(forced): 100},
            extra_body={"ignore_eos": True})
        res.check("OpenAI chat logit_bias forces the token",
                  ch.choices[0].message.content == forced_text
                  and ch.usage.completion_tokens == MAX_TOKENS,
                  f"{ch.choices[0].message.content!r} vs {forced_text!r}")

        kserve_bad = [
            ("infer: invalid JSON", "{", None),
            ("infer: no inputs", {"inputs": []}, "inputs"),
            ("infer: text_input not a string", {"inputs": [
                {"name": "text_input", "shape": [1], "datatype": "BYTES", "data": [5]}]},
             "text_input"),
            ("infer: max_tokens 0", {"inputs": [
                {"name": "text_input", "shape": [1], "datatype": "BYTES", "data": ["a"]},
                {"name": "max_tokens", "shape": [1], "datatype": "INT32", "data": [0]}]},
             "max_tokens"),
            ("infer: bad sampling_parameters", {"inputs": [
                {"name": "text_input", "shape": [1], "datatype": "BYTES", "data": ["a"]},
                {"name": "sampling_parameters", "shape": [1], "datatype": "BYTES",
                 "data": ["{\"top_p\": \"x\"}"]}]}, "top_p"),
            ("infer: unknown input", {"inputs": [
                {"name": "text_input", "shape": [1], "datatype": "BYTES", "data": ["a"]},
                {"name": "bogus", "shape": [1], "datatype": "INT32", "data": [1]}]}, "bogus"),
        ]
        for label, payload, field in kserve_bad:
            st, body, _ = http_json("POST", f"{base}/v2/models/{name}/infer", payload)
            msg = body.get("error") if isinstance(body, dict) else None
            res.check(f"KServe {label} -> 400 naming the field", st == 400 and
                      isinstance(msg, str) and (field is None or field in msg),
                      f"{st} {body}")
        st, body, _ = http_json("POST", f"{base}/v2/models/nope/infer", infer)
        res.check("KServe infer on unknown model 404", st == 404 and "error" in body, f"{st}")

        # ---- bad input: each a 4xx naming the field, then a good request still works ----
        long_prompt = " ".join(["fox"] * (MAX_MODEL_LEN + 20))
        comp_url = base + "/v1/completions"
        chat_url = base + "/v1/chat/completions"
        bad = [
            ("invalid JSON", comp_url, '{"prompt": "a",', 400, ""),
            ("body not an object", comp_url, "[1, 2]", 400, ""),
            ("prompt missing", comp_url, {"model": name}, 400, "prompt"),
            ("prompt wrong type", comp_url, {"prompt": 5}, 400, "prompt"),
            ("max_tokens wrong type", comp_url, {"prompt": "a", "max_tokens": "5"}, 400,
             "max_tokens"),
            ("max_tokens 0", comp_url, {"prompt": "a", "max_tokens": 0}, 400, "max_tokens"),
            ("max_tokens negative", comp_url, {"prompt": "a", "max_tokens": -3}, 400,
             "max_tokens"),
            ("temperature wrong type", comp_url, {"prompt": "a", "temperature": "hot"}, 400,
             "temperature"),
            ("temperature negative", comp_url, {"prompt": "a", "temperature": -1}, 400,
             "temperature"),
            ("top_p out of range", comp_url, {"prompt": "a", "top_p": 1.5}, 400, "top_p"),
            ("stop list too long", comp_url, {"prompt": "a", "stop": ["a", "b", "c", "d", "e"]},
             400, "stop"),
            ("n = 0", comp_url, {"prompt": "a", "n": 0}, 400, "n"),
            ("n = 129", comp_url, {"prompt": "a", "n": 129}, 400, "n"),
            ("best_of 2 below n 3", comp_url, {"prompt": "a", "n": 3, "best_of": 2}, 400,
             "best_of"),
            ("best_of above n streamed", comp_url,
             {"prompt": "a", "best_of": 2, "stream": True}, 400, "best_of"),
            ("echo not a boolean", comp_url, {"prompt": "a", "echo": "yes"}, 400, "echo"),
            ("token id outside the vocabulary in a batch", comp_url,
             {"prompt": [[1, 2], [1, 999999]]}, 400, "prompt[1]"),
            ("logprobs 21", comp_url, {"prompt": "a", "logprobs": 21}, 400, "logprobs"),
            ("stream wrong type", comp_url, {"prompt": "a", "stream": "yes"}, 400, "stream"),
            ("token id outside the vocabulary", comp_url, {"prompt": [1, 999999]}, 400,
             "prompt"),
            ("logit_bias id outside the vocabulary", comp_url,
             {"prompt": "a", "logit_bias": {"999999": 1}}, 400, "logit_bias"),
            ("logit_bias out of range", comp_url, {"prompt": "a", "logit_bias": {"5": 101}},
             400, 'logit_bias["5"]'),
            ("chat: response_format json_schema without a name", chat_url,
             {"messages": [{"role": "user", "content": "a"}],
              "response_format": {"type": "json_schema", "json_schema": {}}}, 400,
             "response_format.json_schema.name"),
            ("chat: json_schema with an unsupported keyword", chat_url,
             {"messages": [{"role": "user", "content": "a"}],
              "response_format": {"type": "json_schema", "json_schema": {
                  "name": "x", "schema": {"type": "object", "minProperties": 1}}}}, 400,
             "response_format.json_schema.schema"),
            ("chat: tool_choice naming a tool not given", chat_url,
             {"messages": [{"role": "user", "content": "a"}],
              "tools": [{"type": "function", "function": {"name": "f"}}],
              "tool_choice": {"type": "function", "function": {"name": "g"}}}, 400,
             "tool_choice.function.name"),
            ("chat: logit_bias key not an id", chat_url,
             {"messages": [{"role": "user", "content": "a"}], "logit_bias": {"05": 1}}, 400,
             "logit_bias"),
            ("unknown model", comp_url, {"model": "no-such-model", "prompt": "a"}, 404, "model"),
            ("prompt longer than the context", comp_url, {"prompt": long_prompt}, 400,
             "prompt"),
            ("chat: messages missing", chat_url, {"model": name}, 400, "messages"),
            ("chat: content wrong type", chat_url,
             {"messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
            ("chat: max_completion_tokens 0", chat_url,
             {"messages": [{"role": "user", "content": "a"}], "max_completion_tokens": 0}, 400,
             "max_completion_tokens"),
            ("chat: unknown model", chat_url,
             {"model": "x", "messages": [{"role": "user", "content": "a"}]}, 404, "model"),
            ("chat: prompt longer than the context", chat_url,
             {"messages": [{"role": "user", "content": long_prompt}]}, 400, "messages"),
        ]
        good = {"model": name, "prompt": PROMPT, "max_tokens": MAX_TOKENS, **GREEDY}
        for label, url, payload, want, field in bad:
            st, body, _ = http_json("POST", url, payload)
            check_error_body(res, f"bad input: {label} -> {want}", st, body, want, field)
            st, body, _ = http_json("POST", comp_url, good)
            ok = st == 200 and body["choices"][0]["text"] == text
            if not ok:
                res.check(f"server still serves after: {label}", False, f"{st} {body}")
        res.check("server served a good request after every bad one", True)

        # Stream requests refused before streaming answer with a plain status too.
        st, body, _ = http_json("POST", comp_url, {"prompt": "a", "stream": True,
                                                   "max_tokens": 0})
        check_error_body(res, "stream request with max_tokens 0 -> 400", st, body, 400,
                         "max_tokens")

        # ---- routing ----
        st, body, h = http_json("GET", comp_url)
        res.check("wrong method -> 405", st == 405 and "error" in body, f"{st} {body}")
        st, body, _ = http_json("GET", base + "/v1/nothing")
        res.check("unknown route -> 404", st == 404 and "error" in body, f"{st} {body}")
        st, body, _ = http_json("DELETE", f"{base}/v2/models/{name}")
        res.check("KServe wrong method -> 405", st == 405, f"{st} {body}")

        # ---- metrics ----
        with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
            ctype = r.headers.get("Content-Type", "")
        res.check("/metrics content type", ctype.startswith("text/plain; version=0.0.4"), ctype)
        m = metrics(base)
        n_ok = metric_value(m, "sampan:requests_total", api="openai", code="200")
        n_400 = metric_value(m, "sampan:requests_total", api="openai", code="400")
        n_kserve = metric_value(m, "sampan:requests_total", api="kserve_rest", code="200")
        res.check("metrics count OpenAI and KServe requests by status",
                  n_ok >= 10 and n_400 >= 15 and n_kserve >= 2,
                  f"openai 200: {n_ok}, 400: {n_400}, kserve 200: {n_kserve}")
        rc = srv.stop()
        res.check("server exits 0 on SIGTERM", rc == 0, f"rc {rc}")
    res.finish()


if __name__ == "__main__":
    main()
