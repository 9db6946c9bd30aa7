"""End-to-end: the gRPC API of `sampan serve` with real clients.

- tritonclient.grpc (KServe v2): health, server and model metadata, ModelInfer with text_input
  -> text_output / output_ids (greedy, equal to the OpenAI HTTP completion of the same prompt),
  ModelStreamInfer token streaming (deltas concatenate to the same text), several requests
  multiplexed on one stream, errors as error_message on the stream;
- grpcio with message classes built at run time from proto/sampan_generate.proto (compiled to a
  descriptor set by grpc_tools.protoc or the system protoc): sampan.v1.Generate streams token
  ids, text deltas, logprobs, the finish reason and usage; text / token-id / chat prompts agree
  with HTTP; stop strings; deadline -> DEADLINE_EXCEEDED; cancelling mid-stream frees the KV
  blocks (sampan:kv_cache_blocks_used back to 0); bad fields -> INVALID_ARGUMENT naming the
  field; unknown model -> NOT_FOUND; --api-key -> UNAUTHENTICATED without the key.
"""

import json
import os
import queue
import sys
import threading
import time

import jsonschema
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402
import serve_util as su  # noqa: E402

MODEL = "serve-model"
PROMPT = "Once upon a time there was a little"
N_TOKENS = 12
API_KEY = "sk-grpc-test-0123456789"
# Long enough to keep a sequence busy while the test cancels it or its deadline passes.
LONG = 1500


# ---- sampan.v1 message classes from the .proto, without generated stubs ----------------------

def load_generate_messages(args):
    """-> (GenerateRequest class, GenerateResponse class), or raises with the reason."""
    m = su.proto_message_classes(args, ["proto/sampan_generate.proto"],
                                 ["sampan.v1.GenerateRequest", "sampan.v1.GenerateResponse"],
                                 "sampan_generate")
    return m["sampan.v1.GenerateRequest"], m["sampan.v1.GenerateResponse"]


class GenerateClient:
    def __init__(self, addr, req_cls, resp_cls):
        import grpc
        self.channel = grpc.insecure_channel(addr)
        self.req_cls = req_cls
        self.call_fn = self.channel.unary_stream(
            "/sampan.v1.Generate/Generate", request_serializer=req_cls.SerializeToString,
            response_deserializer=resp_cls.FromString)

    def start(self, timeout=300, metadata=None, **fields):
        """-> the streaming call (iterate it for responses; .cancel() to cancel)."""
        chat = fields.pop("chat", None)
        token_ids = fields.pop("token_ids", None)
        req = self.req_cls(**fields)
        if chat is not None:
            for role, content in chat:
                m = req.chat.messages.add()
                m.role = role
                m.content = content
        if token_ids is not None:
            req.token_ids.ids.extend(token_ids)
        return self.call_fn(req, timeout=timeout, metadata=metadata)

    def run(self, **kw):
        """-> (responses list, None) or (partial responses, grpc.RpcError)."""
        import grpc
        out = []
        try:
            for r in self.start(**kw):
                out.append(r)
            return out, None
        except grpc.RpcError as e:
            return out, e


def rpc_error(fn):
    """-> the grpc.RpcError / InferenceServerException `fn` raises, or None."""
    try:
        fn()
        return None
    except Exception as e:  # both client libraries' error types are checked by the caller
        return e


def err_code(e):
    """StatusCode name of a grpc.RpcError or a tritonclient InferenceServerException."""
    if e is None:
        return "OK"
    if hasattr(e, "code") and callable(e.code):
        return e.code().name
    s = str(e.status()) if hasattr(e, "status") else ""
    return s.replace("StatusCode.", "")


def err_text(e):
    if e is None:
        return ""
    if hasattr(e, "details") and callable(e.details):
        return e.details() or ""
    return e.message() if hasattr(e, "message") else str(e)


# ---- helpers -------------------------------------------------------------------------------

def http_completion(srv, prompt, max_tokens, **kw):
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}
    body.update(kw)
    st, js, _ = su.http_json("POST", srv.http_url + "/v1/completions", body)
    if st != 200:
        raise RuntimeError(f"HTTP completion -> {st}: {js}")
    return js["choices"][0]["text"]


def triton_inputs(prompt, max_tokens=None, sampling=None, stream=None):
    import tritonclient.grpc as tc
    ins = []
    t = tc.InferInput("text_input", [1], "BYTES")
    t.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
    ins.append(t)
    if max_tokens is not None:
        m = tc.InferInput("max_tokens", [1], "INT32")
        m.set_data_from_numpy(np.array([max_tokens], dtype=np.int32))
        ins.append(m)
    if sampling is not None:
        s = tc.InferInput("sampling_parameters", [1], "BYTES")
        s.set_data_from_numpy(np.array([json.dumps(sampling).encode()], dtype=np.object_))
        ins.append(s)
    if stream is not None:
        b = tc.InferInput("stream", [1], "BOOL")
        b.set_data_from_numpy(np.array([stream], dtype=bool))
        ins.append(b)
    return ins


def kv_blocks_used(srv):
    return su.metric_value(su.metrics(srv.http_url), "sampan:kv_cache_blocks_used")


def wait_kv_free(srv, timeout=20):
    deadline = time.monotonic() + timeout
    used = None
    while time.monotonic() < deadline:
        used = kv_blocks_used(srv)
        if used == 0:
            return 0
        time.sleep(0.05)
    return used


def finished_count(srv, reason):
    return su.metric_value(su.metrics(srv.http_url), "sampan:request_finished_total",
                           finish_reason=reason)


# ---- checks --------------------------------------------------------------------------------

def check_kserve(res, srv, ref_text):
    import tritonclient.grpc as tc
    c = tc.InferenceServerClient(srv.grpc_addr)
    res.check("ServerLive", c.is_server_live())
    res.check("ServerReady", c.is_server_ready())
    res.check("ModelReady", c.is_model_ready(MODEL))
    e = rpc_error(lambda: c.is_model_ready("no-such-model"))
    res.check("ModelReady unknown model -> NOT_FOUND", err_code(e) == "NOT_FOUND", err_text(e))
    md = c.get_server_metadata()
    res.check("ServerMetadata", md.name == "sampan" and md.version != "", str(md).replace("\n", " "))
    mm = c.get_model_metadata(MODEL)
    ins = {t.name: (t.datatype, list(t.shape)) for t in mm.inputs}
    outs = {t.name: (t.datatype, list(t.shape)) for t in mm.outputs}
    res.check("ModelMetadata inputs/outputs",
              mm.name == MODEL and ins.get("text_input") == ("BYTES", [1])
              and ins.get("max_tokens") == ("INT32", [1]) and ins.get("stream") == ("BOOL", [1])
              and outs.get("text_output") == ("BYTES", [1])
              and outs.get("output_ids") == ("INT32", [-1]), f"{ins} {outs}")
    e = rpc_error(lambda: c.get_model_metadata("no-such-model"))
    res.check("ModelMetadata unknown model -> NOT_FOUND", err_code(e) == "NOT_FOUND", err_text(e))

    r = c.infer(MODEL, triton_inputs(PROMPT, N_TOKENS, {"temperature": 0, "ignore_eos": True}),
                request_id="kserve-1")
    text = r.as_numpy("text_output")[0].decode()
    ids = r.as_numpy("output_ids")
    res.check("ModelInfer text_output == HTTP completion", text == ref_text,
              f"{text!r} vs {ref_text!r}")
    res.check("ModelInfer output_ids", ids is not None and ids.dtype == np.int32
              and ids.shape == (N_TOKENS,), f"{ids}")
    res.check("ModelInfer echoes the request id", r.get_response().id == "kserve-1")
    # Triton's vLLM backend documents sampling parameters as strings.
    r2 = c.infer(MODEL, triton_inputs(PROMPT, None, {"temperature": "0", "ignore_eos": "true",
                                                     "max_tokens": str(N_TOKENS)}))
    res.check("ModelInfer string-valued sampling_parameters",
              r2.as_numpy("text_output")[0].decode() == ref_text)

    # response_format in sampling_parameters (a JSON object inside the JSON string) and as a
    # request parameter (protobuf parameters are scalars: a JSON string).
    schema = {"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 1, "maximum": 99},
        "c": {"type": "string", "pattern": "^[a-z]{1,3}$"}}, "required": ["n", "c"],
        "additionalProperties": False}
    rf = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}
    ended, valid = 0, 0
    for seed in range(4):
        for where in ("sampling_parameters", "parameters"):
            sp = {"temperature": 1.0, "seed": seed}
            params = None
            if where == "sampling_parameters":
                sp["response_format"] = rf
            else:
                params = {"response_format": json.dumps(rf)}
            r3 = c.infer(MODEL, triton_inputs(PROMPT, 40, sp), parameters=params)
            out = r3.as_numpy("text_output")[0].decode()
            try:
                jsonschema.validate(json.loads(out), schema)
                valid += 1
                ended += 1
            except ValueError:
                pass  # cut by max_tokens: a prefix, not counted
            except jsonschema.ValidationError:
                ended += 1
    res.check("ModelInfer response_format json_schema (sampling_parameters and parameters): "
              "every complete reply validates (jsonschema)", ended >= 4 and valid == ended,
              f"{valid} valid of {ended} complete of 8")
    e = rpc_error(lambda: c.infer(MODEL, triton_inputs(PROMPT, 4, {"response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"minProperties": 1}}}})))
    res.check("ModelInfer response_format with 'minProperties' -> INVALID_ARGUMENT naming it",
              err_code(e) == "INVALID_ARGUMENT" and "minProperties" in err_text(e), err_text(e))

    e = rpc_error(lambda: c.infer(MODEL, triton_inputs(PROMPT, 0)))
    res.check("ModelInfer max_tokens 0 -> INVALID_ARGUMENT naming it",
              err_code(e) == "INVALID_ARGUMENT" and "max_tokens" in err_text(e), err_text(e))
    m = tc.InferInput("max_tokens", [1], "INT32")
    m.set_data_from_numpy(np.array([4], dtype=np.int32))
    e = rpc_error(lambda: c.infer(MODEL, [m]))
    res.check("ModelInfer without text_input -> INVALID_ARGUMENT naming it",
              err_code(e) == "INVALID_ARGUMENT" and "text_input" in err_text(e), err_text(e))
    e = rpc_error(lambda: c.infer(MODEL, triton_inputs(PROMPT, 4, {"temperature": -1})))
    res.check("ModelInfer bad sampling_parameters -> INVALID_ARGUMENT naming the field",
              err_code(e) == "INVALID_ARGUMENT" and "temperature" in err_text(e), err_text(e))
    e = rpc_error(lambda: c.infer("no-such-model", triton_inputs(PROMPT, 4)))
    res.check("ModelInfer unknown model -> NOT_FOUND", err_code(e) == "NOT_FOUND", err_text(e))
    c.close()


def check_kserve_stream(res, srv, ref_text):
    import tritonclient.grpc as tc
    c = tc.InferenceServerClient(srv.grpc_addr)
    results = queue.Queue()
    c.start_stream(callback=lambda result, error: results.put((result, error)))
    c.async_stream_infer(MODEL, triton_inputs(PROMPT, N_TOKENS, {"temperature": 0,
                                                                 "ignore_eos": True}, True),
                         request_id="s-1")
    pieces, ids, per_response, final, errors = [], [], [], False, []
    deadline = time.monotonic() + 120
    while not final and time.monotonic() < deadline:
        result, error = results.get(timeout=120)
        if error is not None:
            errors.append(str(error))
            break
        pieces.append(result.as_numpy("text_output")[0].decode())
        got = result.as_numpy("output_ids").tolist()
        ids.extend(got)
        final = result.get_response().parameters["triton_final_response"].bool_param
        per_response.append(len(got))
    # The engine's final event may carry the last token or come on its own after it.
    res.check("ModelStreamInfer streams one response per token",
              final and not errors and all(n == 1 for n in per_response[:-1])
              and per_response[-1] in (0, 1), f"ids per response {per_response} {errors}")
    res.check("ModelStreamInfer deltas concatenate to the HTTP text", "".join(pieces) == ref_text,
              f"{''.join(pieces)!r} vs {ref_text!r}")
    res.check("ModelStreamInfer output_ids", len(ids) == N_TOKENS, f"{ids}")

    # Two requests on the same stream, generated concurrently, one of them not streamed.
    c.async_stream_infer(MODEL, triton_inputs(PROMPT, N_TOKENS, {"temperature": 0,
                                                                 "ignore_eos": True}, False),
                         request_id="s-2")
    c.async_stream_infer(MODEL, triton_inputs(PROMPT, N_TOKENS, {"temperature": 0,
                                                                 "ignore_eos": True}, True),
                         request_id="s-3")
    texts = {"s-2": "", "s-3": ""}
    done, errors = set(), []
    while len(done) < 2 and time.monotonic() < deadline:
        result, error = results.get(timeout=120)
        if error is not None:
            errors.append(str(error))
            break
        rid = result.get_response().id
        texts[rid] = texts.get(rid, "") + result.as_numpy("text_output")[0].decode()
        if result.get_response().parameters["triton_final_response"].bool_param:
            done.add(rid)
    res.check("ModelStreamInfer multiplexes requests on one stream",
              not errors and texts == {"s-2": ref_text, "s-3": ref_text}, f"{texts} {errors}")

    # A bad request is answered on the stream; the stream stays usable.
    c.async_stream_infer(MODEL, triton_inputs(PROMPT, 0, None, True), request_id="s-bad")
    result, error = results.get(timeout=60)
    res.check("ModelStreamInfer bad request -> error_message naming the field",
              error is not None and "max_tokens" in str(error)
              and "INVALID_ARGUMENT" in str(error), str(error))
    c.async_stream_infer(MODEL, triton_inputs(PROMPT, 3, {"temperature": 0}, False),
                         request_id="s-after")
    result, error = results.get(timeout=120)
    res.check("ModelStreamInfer keeps serving after an error",
              error is None and result.get_response().id == "s-after", str(error))
    c.stop_stream()
    c.close()


def check_generate(res, srv, gen, ref_text, prompt_ids, chat_ref):
    import grpc
    rs, e = gen.run(model=MODEL, text=PROMPT, temperature=0, max_tokens=N_TOKENS,
                    ignore_eos=True, logprobs=2, request_id="gen-1")
    res.check("Generate completes", e is None and rs and rs[-1].finished, err_text(e))
    if e is not None or not rs:
        return
    text = "".join(r.text for r in rs)
    ids = [t for r in rs for t in r.token_ids]
    lps = [lp for r in rs for lp in r.logprobs]
    final = rs[-1]
    res.check("Generate text == HTTP completion", text == ref_text, f"{text!r} vs {ref_text!r}")
    res.check("Generate streams token ids", len(ids) == N_TOKENS and len(rs) >= 2,
              f"{len(ids)} ids in {len(rs)} responses")
    res.check("Generate echoes request_id", all(r.request_id == "gen-1" for r in rs))
    # Greedy without penalties picks the raw argmax, so the chosen token is the best alternative.
    ok = len(lps) == N_TOKENS and all(
        lp.token_id == t and len(lp.top) == 2 and lp.top[0].token_id == t
        and abs(lp.top[0].logprob - lp.logprob) < 1e-5 and lp.logprob <= 0
        and lp.top[0].logprob >= lp.top[1].logprob for lp, t in zip(lps, ids))
    res.check("Generate logprobs (chosen = top-1 under greedy)", ok,
              f"{[(lp.token_id, lp.logprob, [(a.token_id, a.logprob) for a in lp.top]) for lp in lps[:2]]}")
    res.check("Generate final: finish_reason and usage",
              final.finish_reason == "length" and final.usage.completion_tokens == N_TOKENS
              and final.usage.prompt_tokens == len(prompt_ids)
              and final.timings.total_s >= final.timings.first_token_s > 0,
              f"{final.finish_reason} {final.usage} {final.timings}".replace("\n", " "))

    rs, e = gen.run(model=MODEL, token_ids=prompt_ids, temperature=0, max_tokens=N_TOKENS,
                    ignore_eos=True)
    res.check("Generate with token_ids prompt == text prompt",
              e is None and "".join(r.text for r in rs) == ref_text, err_text(e))

    if chat_ref is not None:
        rs, e = gen.run(model=MODEL, chat=[("user", "Tell me a story.")], temperature=0,
                        max_tokens=N_TOKENS, ignore_eos=True)
        res.check("Generate with chat messages == HTTP chat completion",
                  e is None and "".join(r.text for r in rs) == chat_ref, err_text(e))

    # logit_bias: +100 forces a token at every step (a word of the greedy output other than its
    # first token), -100 on the greedy first token bans it.
    forced = next((t for t in ids[1:] if t not in (ids[0], 0, 1, 2)), 278)
    rs, e = gen.run(model=MODEL, text=PROMPT, temperature=0, max_tokens=N_TOKENS,
                    ignore_eos=True, logit_bias={forced: 100.0})
    got = [t for r in rs for t in r.token_ids]
    res.check("Generate logit_bias +100 forces the token", e is None and got == [forced] * N_TOKENS,
              f"{got} {err_text(e)}")
    rs, e = gen.run(model=MODEL, text=PROMPT, temperature=0, max_tokens=N_TOKENS,
                    ignore_eos=True, logit_bias={ids[0]: -100.0})
    got = [t for r in rs for t in r.token_ids]
    res.check("Generate logit_bias -100 bans the greedy first token",
              e is None and got and got[0] != ids[0], f"{got} vs {ids} {err_text(e)}")

    # JSON mode: replies that stop on their own are one JSON object ('"' and '}' nudged so that
    # the tiny random model closes what it opens).
    ended, objects, texts = 0, 0, []
    for seed in range(4):
        rs, e = gen.run(model=MODEL, text="JSON:", temperature=1.0, seed=seed, max_tokens=60,
                        json_object=True, logit_bias={29913: 6.0, 29908: 6.0})
        text = "".join(r.text for r in rs)
        texts.append(text)
        if e is None and rs and rs[-1].finish_reason == "stop":
            ended += 1
            try:
                objects += isinstance(json.loads(text), dict)
            except ValueError:
                pass
    res.check("Generate json_object: every reply that stops is one JSON object",
              ended >= 2 and objects == ended, f"{objects} of {ended} of 4: {texts[:2]}")

    # json_schema: replies that stop validate with Python's jsonschema; a schema the grammar
    # cannot follow is INVALID_ARGUMENT naming the keyword.
    schema = {"type": "object", "properties": {
        "id": {"type": "integer"}, "label": {"type": "string", "maxLength": 6},
        "flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}},
        "required": ["id", "label"], "additionalProperties": False}
    ended, valid, texts = 0, 0, []
    for seed in range(4):
        rs, e = gen.run(model=MODEL, text="JSON:", temperature=1.0, seed=seed, max_tokens=120,
                        json_schema=json.dumps(schema))
        text = "".join(r.text for r in rs)
        texts.append(text)
        if e is None and rs and rs[-1].finish_reason == "stop":
            ended += 1
            try:
                jsonschema.validate(json.loads(text), schema)
                valid += 1
            except (ValueError, jsonschema.ValidationError):
                pass
    res.check("Generate json_schema: every reply that stops validates (jsonschema)",
              ended >= 3 and valid == ended, f"{valid} of {ended} of 4: {texts[:2]}")
    rs, e = gen.run(model=MODEL, text="JSON:", max_tokens=4,
                    json_schema='{"type": "object", "minProperties": 1}')
    res.check("Generate json_schema with 'minProperties' -> INVALID_ARGUMENT naming it",
              e is not None and err_code(e) == "INVALID_ARGUMENT"
              and "minProperties" in err_text(e), err_text(e))
    rs, e = gen.run(model=MODEL, text="JSON:", max_tokens=4, json_object=True,
                    json_schema='{"type": "object"}')
    res.check("Generate json_schema with json_object -> INVALID_ARGUMENT",
              e is not None and err_code(e) == "INVALID_ARGUMENT", err_text(e))

    # A stop string inside the greedy text: output ends just before it.
    stop = ref_text[len(ref_text) // 2:len(ref_text) // 2 + 3]
    if stop.strip():
        rs, e = gen.run(model=MODEL, text=PROMPT, temperature=0, max_tokens=N_TOKENS,
                        ignore_eos=True, stop=[stop])
        got = "".join(r.text for r in rs)
        res.check("Generate stop string", e is None and got == ref_text[:ref_text.find(stop)]
                  and rs[-1].finish_reason == "stop" and rs[-1].stop_matched == stop,
                  f"stop {stop!r}: {got!r} {err_text(e)}")

    # Errors.
    def expect(name, code, field, **kw):
        rs, e = gen.run(**kw)
        res.check(name, err_code(e) == code and (field is None or field in err_text(e)),
                  f"{err_code(e)}: {err_text(e)}")

    expect("Generate bad temperature -> INVALID_ARGUMENT", "INVALID_ARGUMENT", "temperature",
           model=MODEL, text=PROMPT, temperature=-1.0, max_tokens=4)
    expect("Generate max_tokens 0 -> INVALID_ARGUMENT", "INVALID_ARGUMENT", "max_tokens",
           model=MODEL, text=PROMPT, max_tokens=0)
    expect("Generate without prompt -> INVALID_ARGUMENT", "INVALID_ARGUMENT", "prompt",
           model=MODEL, max_tokens=4)
    expect("Generate logprobs 21 -> INVALID_ARGUMENT", "INVALID_ARGUMENT", "logprobs",
           model=MODEL, text=PROMPT, max_tokens=4, logprobs=21)
    expect("Generate logit_bias id outside the vocab -> INVALID_ARGUMENT", "INVALID_ARGUMENT",
           "logit_bias", model=MODEL, text=PROMPT, max_tokens=4, logit_bias={10 ** 9: 1.0})
    expect("Generate logit_bias 101 -> INVALID_ARGUMENT", "INVALID_ARGUMENT", "logit_bias[5]",
           model=MODEL, text=PROMPT, max_tokens=4, logit_bias={5: 101.0})
    expect("Generate token id outside vocab -> INVALID_ARGUMENT", "INVALID_ARGUMENT", None,
           model=MODEL, token_ids=[1, 10 ** 9], max_tokens=4)
    expect("Generate prompt longer than the context -> INVALID_ARGUMENT", "INVALID_ARGUMENT",
           None, model=MODEL, token_ids=[1] * 100000, max_tokens=4)
    expect("Generate unknown model -> NOT_FOUND", "NOT_FOUND", "no-such-model",
           model="no-such-model", text=PROMPT, max_tokens=4)

    # Deadline: the call fails with DEADLINE_EXCEEDED and the engine request ends.
    t0 = time.monotonic()
    rs, e = gen.run(model=MODEL, text=PROMPT, max_tokens=LONG, ignore_eos=True, temperature=0,
                    timeout=0.5)
    res.check("Generate deadline -> DEADLINE_EXCEEDED",
              err_code(e) == "DEADLINE_EXCEEDED" and time.monotonic() - t0 < 10,
              f"{err_code(e)} after {time.monotonic() - t0:.2f} s")
    used = wait_kv_free(srv)
    res.check("deadline frees the KV blocks", used == 0, f"kv_cache_blocks_used {used}")

    # Cancellation mid-stream.
    cancelled_before = finished_count(srv, "cancelled")
    call = gen.start(model=MODEL, text=PROMPT, max_tokens=LONG, ignore_eos=True, temperature=0)
    got = 0
    try:
        for r in call:
            got += len(r.token_ids)
            if got >= 3:
                break
    except grpc.RpcError:
        pass
    busy = kv_blocks_used(srv)
    call.cancel()
    used = wait_kv_free(srv)
    res.check("cancel mid-stream frees the KV blocks", got >= 3 and busy > 0 and used == 0,
              f"{got} tokens read, blocks {busy} -> {used}")
    deadline = time.monotonic() + 10
    while finished_count(srv, "cancelled") <= cancelled_before and time.monotonic() < deadline:
        time.sleep(0.05)
    res.check("cancelled request counted in request_finished_total",
              finished_count(srv, "cancelled") > cancelled_before)

    m = su.metrics(srv.http_url)
    ok_rpcs = su.metric_value(m, "sampan:requests_total", api="grpc", code="0")
    bad_rpcs = su.metric_value(m, "sampan:requests_total", api="grpc", code="3")
    res.check("gRPC requests counted by status in /metrics", ok_rpcs > 0 and bad_rpcs > 0,
              f"OK {ok_rpcs}, INVALID_ARGUMENT {bad_rpcs}")


def check_auth(res, args, model_dir, req_cls, resp_cls, ref_text):
    import tritonclient.grpc as tc
    with su.Server(args, model_dir, ["--api-key", API_KEY]) as srv:
        c = tc.InferenceServerClient(srv.grpc_addr)
        res.check("auth: ServerLive/ServerReady need no key",
                  c.is_server_live() and c.is_server_ready())
        e = rpc_error(lambda: c.get_server_metadata())
        res.check("auth: ServerMetadata without key -> UNAUTHENTICATED",
                  err_code(e) == "UNAUTHENTICATED", err_text(e))
        e = rpc_error(lambda: c.infer(MODEL, triton_inputs(PROMPT, 2),
                                      headers={"authorization": "Bearer wrong"}))
        res.check("auth: ModelInfer with a wrong key -> UNAUTHENTICATED",
                  err_code(e) == "UNAUTHENTICATED", err_text(e))
        hdr = {"authorization": f"Bearer {API_KEY}"}
        r = c.infer(MODEL, triton_inputs(PROMPT, N_TOKENS, {"temperature": 0,
                                                            "ignore_eos": True}), headers=hdr)
        res.check("auth: ModelInfer with the key",
                  r.as_numpy("text_output")[0].decode() == ref_text)
        gen = GenerateClient(srv.grpc_addr, req_cls, resp_cls)
        rs, e = gen.run(model=MODEL, text=PROMPT, max_tokens=2)
        res.check("auth: Generate without key -> UNAUTHENTICATED",
                  err_code(e) == "UNAUTHENTICATED", err_text(e))
        rs, e = gen.run(model=MODEL, text=PROMPT, max_tokens=2,
                        metadata=[("authorization", f"Bearer {API_KEY}")])
        res.check("auth: Generate with the key", e is None and rs and rs[-1].finished,
                  err_text(e))
        c.close()
        gen.channel.close()


def main():
    args = eu.parse_args(__doc__.split("\n")[0])
    res = eu.Results()
    eu.require_binary(args, res)
    try:
        import grpc  # noqa: F401
        import tritonclient.grpc  # noqa: F401
    except ImportError as e:
        res.check("python packages grpcio and tritonclient[grpc]", False, str(e))
        res.finish()
    try:
        req_cls, resp_cls = load_generate_messages(args)
    except Exception as e:
        res.check("sampan_generate.proto message classes", False, str(e))
        res.finish()
    model_dir = su.make_serve_model(args)
    from tokenizers import Tokenizer
    prompt_ids = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json")).encode(
        PROMPT, add_special_tokens=True).ids

    with su.Server(args, model_dir) as srv:
        ref_text = http_completion(srv, PROMPT, N_TOKENS)
        res.check("HTTP reference completion", len(ref_text) > 0, repr(ref_text))
        body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story."}],
                "max_tokens": N_TOKENS, "temperature": 0, "ignore_eos": True}
        st, js, _ = su.http_json("POST", srv.http_url + "/v1/chat/completions", body)
        chat_ref = js["choices"][0]["message"]["content"] if st == 200 else None
        for name, fn in [("kserve", lambda: check_kserve(res, srv, ref_text)),
                         ("kserve stream", lambda: check_kserve_stream(res, srv, ref_text)),
                         ("generate", lambda: check_generate(
                             res, srv, GenerateClient(srv.grpc_addr, req_cls, resp_cls),
                             ref_text, prompt_ids, chat_ref))]:
            try:
                fn()
            except Exception as e:  # one broken group must not hide the others' results
                res.check(f"{name} checks ran to the end", False, f"{type(e).__name__}: {e}")
        res.check("server still ready after the bad requests",
                  su.http_json("GET", srv.http_url + "/v2/health/ready")[0] == 200)
    try:
        check_auth(res, args, model_dir, req_cls, resp_cls, ref_text)
    except Exception as e:
        res.check("auth checks ran to the end", False, f"{type(e).__name__}: {e}")
    res.finish()


if __name__ == "__main__":
    main()
