"""End-to-end: `sampan serve --model FILE.onnx` serves a classic model over KServe v2.

For bert_tiny (three INT64 inputs [batch, sequence], two FP32 outputs) and resnet_tiny (one FP32
input [batch, 3, height, width]):
- health and readiness; GET /v2/models/<name> and gRPC ModelMetadata list the real inputs and
  outputs (names, datatypes, shapes with -1 for symbolic dimensions);
- POST /v2/models/<name>/infer with JSON data (flat and nested) and with the binary tensor
  extension (Inference-Header-Content-Length), outputs as JSON or binary (binary_data_output,
  per-output binary_data), `outputs` selecting one output; gRPC ModelInfer with
  raw_input_contents (tritonclient.grpc) and with typed contents (int64_contents); every output
  agrees with the committed torch outputs (cosine >= 0.99999, max relative error <= 1e-4);
- errors are 400 / INVALID_ARGUMENT naming the input (wrong datatype, wrong shape, disagreeing
  symbolic dimensions, unknown input, missing input, data count not matching the shape, bad
  binary sizes) or the node (a token id out of range found by the gather), and the server
  answers correctly afterwards;
- the LLM endpoints (/v1/completions, /v1/chat/completions, gRPC Generate and ModelStreamInfer)
  answer 400 / INVALID_ARGUMENT pointing at the KServe route;
- concurrent requests (8 threads x 5, HTTP and gRPC mixed) are all correct;
- sampan:requests_total counts them by API and status;
- dynamic batching (--max-batch-size 8 --batch-delay-ms 100, resnet_tiny): concurrent requests
  of two image sizes are all correct, and sampan:tensor_*_total show that requests were merged
  (fewer executor runs than requests) and count every row exactly once;
- --precision bf16 (resnet_tiny): the served outputs equal `sampan infer --precision bf16`'s bit
  for bit, agree with the f32 reference within bf16 bounds and differ from it; --precision fp16
  is refused in one line.

tritonclient.http is not used: it needs gevent, which this environment lacks; the binary tensor
extension is spoken here with http.client, byte for byte as tritonclient.http sends it.
"""

import http.client
import json
import os
import sys
import threading

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402
import serve_util as su  # noqa: E402

COS_MIN = 0.99999
REL_MAX = 1e-4
# --precision bf16 against the f32 reference: test_classic_models.py's bounds and reasons.
BF16_COS_MIN = 0.999
BF16_REL_MAX = 0.03
NP_TO_KSERVE = {np.dtype(np.float32): "FP32", np.dtype(np.int64): "INT64",
                np.dtype(np.int32): "INT32", np.dtype(np.bool_): "BOOL",
                np.dtype(np.uint8): "UINT8", np.dtype(np.int8): "INT8"}
KSERVE_TO_NP = {v: k for k, v in NP_TO_KSERVE.items()}


def classic_dir(args):
    return os.path.join(args.source_dir, "tests", "data", "classic")


def load_cases(args, model):
    """-> [(inputs {name: array}, outputs {name: array})] from the manifest's cases."""
    d = classic_dir(args)
    with open(os.path.join(d, "manifest.json")) as f:
        m = json.load(f)[model]
    cases = []
    for k in m["cases"]:
        ins = {n: np.load(os.path.join(d, f"{model}.{k}.{n}.npy")) for n in m["inputs"]}
        outs = {n: np.load(os.path.join(d, f"{model}.{k}.{n}.npy")) for n in m["outputs"]}
        cases.append((ins, outs))
    return cases


def agreement(got, want, cos_min=COS_MIN, rel_max=REL_MAX):
    g = np.asarray(got, dtype=np.float64).ravel()
    w = np.asarray(want, dtype=np.float64).ravel()
    if g.shape != w.shape:
        return False, f"shape {np.shape(got)} != {np.shape(want)}"
    cos = float(g @ w / max(np.linalg.norm(g) * np.linalg.norm(w), 1e-300))
    rel = float(np.max(np.abs(g - w)) / max(np.max(np.abs(w)), 1e-30))
    ok = cos >= cos_min and rel <= rel_max and np.isfinite(g).all()
    return ok, f"cosine {cos:.8f}, max relative error {rel:.2e}"


def outputs_agree(got, want, shapes_too=True, cos_min=COS_MIN, rel_max=REL_MAX):
    """-> (ok, detail) over every output in `want`."""
    details = []
    for name, w in want.items():
        if name not in got:
            return False, f"output {name} missing (got {sorted(got)})"
        g = got[name]
        if shapes_too and tuple(np.shape(g)) != tuple(w.shape):
            return False, f"{name}: shape {np.shape(g)} != {w.shape}"
        ok, d = agreement(g, w, cos_min, rel_max)
        details.append(f"{name}: {d}")
        if not ok:
            return False, "; ".join(details)
    return True, "; ".join(details)


# ---- HTTP: JSON and the binary tensor extension -------------------------------------------------

def post_raw(srv, path, body, headers=None, timeout=120):
    """-> (status, response headers (lower-cased), body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.http_port, timeout=timeout)
    try:
        hdrs = {"Content-Type": "application/octet-stream"}
        hdrs.update(headers or {})
        conn.request("POST", path, body=body, headers=hdrs)
        r = conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        conn.close()


def infer_http(srv, model, inputs, binary_in=False, binary_out=False, outputs=None,
               nested=False, override=None):
    """Runs one infer over HTTP. -> (status, {name: array} or error text, response JSON).

    `inputs`: {name: array}. `override(header_dict, binary_bytes) -> (header, binary, headers)`
    lets a case break the request on purpose.
    """
    header = {"id": "req-1", "inputs": []}
    chunks = []
    for name, a in inputs.items():
        t = {"name": name, "datatype": NP_TO_KSERVE[a.dtype], "shape": list(a.shape)}
        if binary_in:
            raw = np.ascontiguousarray(a).tobytes()
            t["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            t["data"] = a.tolist() if nested else a.ravel().tolist()
        header["inputs"].append(t)
    if binary_out:
        header["parameters"] = {"binary_data_output": True}
    if outputs is not None:
        header["outputs"] = [{"name": n} for n in outputs]
    binary = b"".join(chunks)
    extra = {}
    if override is not None:
        header, binary, extra = override(header, binary)
    hjson = json.dumps(header).encode()
    headers = {}
    if binary or binary_in:
        headers["Inference-Header-Content-Length"] = str(len(hjson))
    headers.update(extra)
    status, rh, body = post_raw(srv, f"/v2/models/{model}/infer", hjson + binary, headers)
    return decode_http_response(status, rh, body)


def decode_http_response(status, rh, body):
    hlen = rh.get("inference-header-content-length")
    if hlen is not None:
        js, rest = body[:int(hlen)], body[int(hlen):]
    else:
        js, rest = body, b""
    try:
        doc = json.loads(js.decode())
    except ValueError:
        return status, body.decode(errors="replace"), None
    if status != 200:
        return status, doc.get("error", str(doc)) if isinstance(doc, dict) else str(doc), doc
    got = {}
    pos = 0
    for o in doc.get("outputs", []):
        dt = KSERVE_TO_NP[o["datatype"]]
        size = (o.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            got[o["name"]] = np.frombuffer(rest[pos:pos + size], dtype=dt).reshape(o["shape"])
            pos += size
        else:
            got[o["name"]] = np.asarray(o["data"], dtype=dt).reshape(o["shape"])
    if pos != len(rest):
        return -1, f"{len(rest) - pos} unread binary bytes", doc
    return status, got, doc


# ---- gRPC --------------------------------------------------------------------------------------

def infer_grpc(client, model, inputs, outputs=None):
    """tritonclient.grpc (raw_input_contents). -> (ok, {name: array} or the exception)."""
    import tritonclient.grpc as tc
    from tritonclient.utils import InferenceServerException
    ins = []
    for name, a in inputs.items():
        t = tc.InferInput(name, list(a.shape), NP_TO_KSERVE[a.dtype])
        t.set_data_from_numpy(np.ascontiguousarray(a))
        ins.append(t)
    outs = [tc.InferRequestedOutput(n) for n in outputs] if outputs else None
    try:
        r = client.infer(model, ins, outputs=outs, client_timeout=120)
    except InferenceServerException as e:
        return False, e
    got = {}
    for o in r.get_response().outputs:
        got[o.name] = r.as_numpy(o.name)
    return True, got


def grpc_err(e):
    """(status name, message) of a tritonclient InferenceServerException or grpc.RpcError."""
    status = getattr(e, "status", None)
    if callable(status):
        return str(status() or ""), str(e.message() if callable(getattr(e, "message", None)) else e)
    code = getattr(e, "code", None)
    return (code().name if callable(code) else ""), (e.details() if hasattr(e, "details") else str(e))


# ---- the checks ----------------------------------------------------------------------------------

def check_metadata(res, srv, client, model, specs):
    """specs: [(kind, name, datatype, shape)]"""
    st, body, _ = su.http_json("GET", f"{srv.http_url}/v2/models/{model}")
    ok = st == 200 and isinstance(body, dict)
    want_in = [(n, d, s) for k, n, d, s in specs if k == "in"]
    want_out = [(n, d, s) for k, n, d, s in specs if k == "out"]
    if ok:
        got_in = [(t["name"], t["datatype"], t["shape"]) for t in body.get("inputs", [])]
        got_out = [(t["name"], t["datatype"], t["shape"]) for t in body.get("outputs", [])]
        ok = got_in == want_in and got_out == want_out
    res.check(f"{model}: REST metadata lists the inputs and outputs", ok, json.dumps(body)[:400])
    try:
        md = client.get_model_metadata(model)
        got_in = [(t.name, t.datatype, list(t.shape)) for t in md.inputs]
        got_out = [(t.name, t.datatype, list(t.shape)) for t in md.outputs]
        res.check(f"{model}: gRPC ModelMetadata lists the inputs and outputs",
                  got_in == want_in and got_out == want_out, f"{got_in} {got_out}")
    except Exception as e:  # noqa: BLE001
        res.check(f"{model}: gRPC ModelMetadata", False, repr(e))
    st, body, _ = su.http_json("GET", f"{srv.http_url}/v2/models/{model}/ready")
    res.check(f"{model}: /v2/models/{model}/ready 200", st == 200 and body.get("ready") is True,
              f"{st} {body}")
    st, body, _ = su.http_json("GET", f"{srv.http_url}/v2/health/ready")
    res.check(f"{model}: /v2/health/ready 200", st == 200, f"{st} {body}")
    res.check(f"{model}: gRPC ServerReady and ModelReady",
              client.is_server_ready() and client.is_model_ready(model))


def check_correct(res, srv, client, model, cases):
    for k, (ins, outs) in enumerate(cases):
        for label, kw in [("JSON in, JSON out", {}),
                          ("nested JSON in", {"nested": True}),
                          ("binary in, JSON out", {"binary_in": True}),
                          ("binary in, binary out", {"binary_in": True, "binary_out": True}),
                          ("JSON in, binary out", {"binary_out": True})]:
            if k > 0 and label not in ("JSON in, JSON out", "binary in, binary out"):
                continue  # every mode once; the larger case in the two main ones
            st, got, doc = infer_http(srv, model, ins, **kw)
            if st != 200:
                res.check(f"{model} case {k}: HTTP {label}", False, f"{st}: {got}")
                continue
            ok, d = outputs_agree(got, outs)
            ok = ok and doc.get("model_name") == model and doc.get("id") == "req-1"
            res.check(f"{model} case {k}: HTTP {label} agrees with torch", ok, d)
        ok, got = infer_grpc(client, model, ins)
        if not ok:
            res.check(f"{model} case {k}: gRPC ModelInfer", False, str(got))
        else:
            ok, d = outputs_agree(got, outs)
            res.check(f"{model} case {k}: gRPC ModelInfer (raw contents) agrees with torch", ok, d)
    # `outputs` selects one output, over both protocols, and a per-output binary_data flag.
    ins, outs = cases[0]
    name = list(outs)[-1]
    st, got, doc = infer_http(srv, model, ins, outputs=[name])
    res.check(f"{model}: HTTP `outputs` selects {name}",
              st == 200 and list(got) == [name] and outputs_agree(got, {name: outs[name]})[0],
              f"{st} {list(got) if isinstance(got, dict) else got}")

    def per_output_binary(header, binary):
        header["outputs"] = [{"name": name, "parameters": {"binary_data": True}}]
        return header, binary, {}
    st, got, doc = infer_http(srv, model, ins, override=per_output_binary)
    bin_ok = (st == 200 and doc is not None and
              "binary_data_size" in (doc["outputs"][0].get("parameters") or {}) and
              outputs_agree(got, {name: outs[name]})[0])
    res.check(f"{model}: HTTP outputs[].parameters.binary_data", bin_ok,
              f"{st} {json.dumps(doc)[:200] if doc else got}")
    ok, got = infer_grpc(client, model, ins, outputs=[name])
    res.check(f"{model}: gRPC outputs selects {name}",
              ok and list(got) == [name] and outputs_agree(got, {name: outs[name]})[0],
              str(got)[:200] if not ok else f"{list(got)}")


def check_http_error(res, label, result, needles, status=400):
    st, text, _ = result
    text = str(text)
    ok = st == status and all(n in text for n in needles) and "\n" not in text.strip()
    res.check(label, ok, f"{st}: {text[:300]}")


def check_grpc_error(res, label, result, needles, code="StatusCode.INVALID_ARGUMENT"):
    ok, e = result
    if ok:
        res.check(label, False, "succeeded")
        return
    status, msg = grpc_err(e)
    res.check(label, code in status and all(n in msg for n in needles), f"{status}: {msg[:300]}")


def check_bert_errors(res, srv, client, cases):
    model = "bert_tiny"
    ins, outs = cases[0]
    wrong_dtype = dict(ins, input_ids=ins["input_ids"].astype(np.int32))
    check_http_error(res, "HTTP wrong datatype names the input",
                     infer_http(srv, model, wrong_dtype), ["input_ids", "INT32", "INT64"])
    check_grpc_error(res, "gRPC wrong datatype names the input",
                     infer_grpc(client, model, wrong_dtype), ["input_ids", "INT64"])
    wrong_rank = dict(ins, attention_mask=ins["attention_mask"].reshape(1, 1, -1))
    check_http_error(res, "HTTP wrong rank names the input",
                     infer_http(srv, model, wrong_rank), ["attention_mask", "shape"])
    check_grpc_error(res, "gRPC wrong rank names the input",
                     infer_grpc(client, model, wrong_rank), ["attention_mask"])
    short = dict(ins, token_type_ids=ins["token_type_ids"][:, :-1])
    check_http_error(res, "HTTP disagreeing sequence dimension names the input",
                     infer_http(srv, model, short), ["token_type_ids", "sequence"])
    check_grpc_error(res, "gRPC disagreeing sequence dimension names the input",
                     infer_grpc(client, model, short), ["token_type_ids"])
    unknown = dict(ins, bogus=np.zeros((1, 16), np.int64))
    check_http_error(res, "HTTP unknown input named", infer_http(srv, model, unknown),
                     ["unknown input 'bogus'"])
    check_grpc_error(res, "gRPC unknown input named", infer_grpc(client, model, unknown),
                     ["bogus"])
    missing = {k: v for k, v in ins.items() if k != "token_type_ids"}
    check_http_error(res, "HTTP missing input named", infer_http(srv, model, missing),
                     ["token_type_ids", "missing"])
    check_grpc_error(res, "gRPC missing input named", infer_grpc(client, model, missing),
                     ["token_type_ids", "missing"])

    def drop_one(header, binary):
        header["inputs"][0]["data"] = header["inputs"][0]["data"][:-1]
        return header, binary, {}
    check_http_error(res, "HTTP data count not matching the shape",
                     infer_http(srv, model, ins, override=drop_one), ["input_ids", "16"])

    def bad_size(header, binary):
        header["inputs"][1]["parameters"]["binary_data_size"] -= 8
        return header, binary, {}
    check_http_error(res, "HTTP binary_data_size not matching the shape",
                     infer_http(srv, model, ins, binary_in=True, override=bad_size),
                     ["attention_mask", "binary_data_size"])

    def truncated(header, binary):
        return header, binary[:-8], {}
    check_http_error(res, "HTTP binary data shorter than declared",
                     infer_http(srv, model, ins, binary_in=True, override=truncated),
                     ["token_type_ids", "binary_data_size"])

    def extra_bytes(header, binary):
        return header, binary + b"\0" * 8, {}
    check_http_error(res, "HTTP binary data longer than declared",
                     infer_http(srv, model, ins, binary_in=True, override=extra_bytes),
                     ["binary"])

    def bad_header_len(header, binary):
        return header, binary, {"Inference-Header-Content-Length": "99999999"}
    check_http_error(res, "HTTP Inference-Header-Content-Length past the body",
                     infer_http(srv, model, ins, binary_in=True, override=bad_header_len),
                     ["Inference-Header-Content-Length"])
    too_big = dict(ins, input_ids=np.where(ins["input_ids"] > 0, 10 ** 6, 0).astype(np.int64))
    check_http_error(res, "HTTP token id out of range names the node",
                     infer_http(srv, model, too_big), ["node '"])
    check_grpc_error(res, "gRPC token id out of range names the node",
                     infer_grpc(client, model, too_big), ["node '"])
    check_http_error(res, "HTTP unknown output named",
                     infer_http(srv, model, ins, outputs=["nope"]), ["nope"])
    check_grpc_error(res, "gRPC unknown output named",
                     infer_grpc(client, model, ins, outputs=["nope"]), ["nope"])
    st, body, _ = su.http_json("POST", f"{srv.http_url}/v2/models/other/infer", {"inputs": []})
    res.check("HTTP unknown model 404", st == 404, f"{st} {body}")

    # gRPC typed contents (int64_contents), through the generated stub.
    from tritonclient.grpc import service_pb2, service_pb2_grpc
    import grpc
    with grpc.insecure_channel(srv.grpc_addr) as ch:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
        req = service_pb2.ModelInferRequest(model_name=model, id="typed")
        for name, a in ins.items():
            t = req.inputs.add(name=name, datatype="INT64", shape=list(a.shape))
            t.contents.int64_contents.extend(a.ravel().tolist())
        try:
            r = stub.ModelInfer(req, timeout=120)
            got = {}
            for o, raw in zip(r.outputs, r.raw_output_contents):
                got[o.name] = np.frombuffer(raw, np.float32).reshape(list(o.shape))
            ok, d = outputs_agree(got, outs)
            res.check("gRPC typed int64_contents agrees with torch", ok and r.id == "typed", d)
        except grpc.RpcError as e:
            res.check("gRPC typed int64_contents", False, f"{e.code()}: {e.details()}")
        req2 = service_pb2.ModelInferRequest(model_name=model)
        for name, a in ins.items():
            t = req2.inputs.add(name=name, datatype="INT64", shape=list(a.shape))
            t.contents.int64_contents.extend(a.ravel().tolist()[:-1])
        try:
            stub.ModelInfer(req2, timeout=60)
            res.check("gRPC typed contents count mismatch", False, "succeeded")
        except grpc.RpcError as e:
            res.check("gRPC typed contents count mismatch is INVALID_ARGUMENT naming the input",
                      e.code() == grpc.StatusCode.INVALID_ARGUMENT and "input_ids" in e.details(),
                      f"{e.code()}: {e.details()}")
        # LLM RPCs on a tensor model.
        gen = ch.unary_stream("/sampan.v1.Generate/Generate", request_serializer=lambda b: b,
                              response_deserializer=lambda b: b)
        try:
            list(gen(b"", timeout=60))
            res.check("gRPC Generate on a tensor model", False, "succeeded")
        except grpc.RpcError as e:
            res.check("gRPC Generate on a tensor model: INVALID_ARGUMENT pointing at infer",
                      e.code() == grpc.StatusCode.INVALID_ARGUMENT and "tensor model" in e.details()
                      and "ModelInfer" in e.details(), f"{e.code()}: {e.details()}")
    # After every error the server still answers correctly.
    st, got, _ = infer_http(srv, model, ins)
    res.check("HTTP infer correct after the errors",
              st == 200 and outputs_agree(got, outs)[0], f"{st}")
    ok, got = infer_grpc(client, model, ins)
    res.check("gRPC infer correct after the errors", ok and outputs_agree(got, outs)[0],
              "" if ok else str(got)[:200])


def check_llm_endpoints(res, srv, model):
    st, body, _ = su.http_json("POST", f"{srv.http_url}/v1/completions",
                               {"model": model, "prompt": "hi", "max_tokens": 2})
    msg = json.dumps(body)
    res.check("/v1/completions on a tensor model: 400 pointing at /v2 infer",
              st == 400 and "tensor model" in msg and f"/v2/models/{model}/infer" in msg,
              f"{st} {msg[:300]}")
    st, body, _ = su.http_json("POST", f"{srv.http_url}/v1/chat/completions",
                               {"model": model, "messages": [{"role": "user", "content": "hi"}]})
    msg = json.dumps(body)
    res.check("/v1/chat/completions on a tensor model: 400 pointing at /v2 infer",
              st == 400 and "tensor model" in msg, f"{st} {msg[:300]}")


def check_stream_infer(res, srv, model, ins):
    import tritonclient.grpc as tc
    import queue
    q = queue.Queue()
    c = tc.InferenceServerClient(srv.grpc_addr)
    try:
        c.start_stream(callback=lambda result, error: q.put((result, error)))
        tin = []
        for name, a in ins.items():
            t = tc.InferInput(name, list(a.shape), NP_TO_KSERVE[a.dtype])
            t.set_data_from_numpy(a)
            tin.append(t)
        c.async_stream_infer(model, tin)
        result, error = q.get(timeout=60)
        res.check("gRPC ModelStreamInfer on a tensor model: an error pointing at ModelInfer",
                  error is not None and "tensor model" in str(error), str(error)[:300])
    finally:
        c.stop_stream()
        c.close()


def check_concurrent(res, srv, model, cases, threads=8, per_thread=5):
    import tritonclient.grpc as tc
    errors = []
    count = [0]
    lock = threading.Lock()

    def work(t):
        client = tc.InferenceServerClient(srv.grpc_addr) if t % 2 else None
        try:
            for i in range(per_thread):
                ins, outs = cases[(t + i) % len(cases)]
                if client is not None:
                    ok, got = infer_grpc(client, model, ins)
                    st = 200 if ok else str(got)
                else:
                    st, got, _ = infer_http(srv, model, ins, binary_in=bool(i % 2),
                                            binary_out=bool(i % 2))
                good = st == 200 and outputs_agree(got, outs)[0]
                with lock:
                    count[0] += 1
                    if not good:
                        errors.append(f"thread {t} request {i}: {st} "
                                      f"{outputs_agree(got, outs)[1] if st == 200 else got}")
        except Exception as e:  # noqa: BLE001
            with lock:
                errors.append(f"thread {t}: {e!r}")
        finally:
            if client is not None:
                client.close()

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(600)
    res.check(f"{model}: {threads} threads x {per_thread} concurrent requests all correct",
              not errors and count[0] == threads * per_thread,
              f"{count[0]} done; " + "; ".join(errors[:3]))


def serve(args, model, extra=()):
    path = os.path.join(classic_dir(args), f"{model}.onnx")
    return su.Server(args, path, extra_args=["--threads", "2"] + list(extra),
                     env={"SAMPAN_LOG_LEVEL": "info"})


def tensor_counters(srv):
    m = su.metrics(srv.http_url)
    return {k: su.metric_value(m, f"sampan:tensor_{k}_total") for k in ("runs", "requests", "rows")}


def check_dynamic_batching(res, args):
    resnet = load_cases(args, "resnet_tiny")
    with serve(args, "resnet_tiny", ["--max-batch-size", "8", "--batch-delay-ms", "100"]) as srv:
        res.check("batching: the server says it merges requests",
                  "dynamic batching up to 8 rows" in srv.log_text(), srv.log_tail(5))
        before = tensor_counters(srv)
        threads, per_thread = 8, 3
        check_concurrent(res, srv, "resnet_tiny", resnet, threads=threads, per_thread=per_thread)
        after = tensor_counters(srv)
        d = {k: after[k] - before[k] for k in after}
        sent_rows = sum(resnet[(t + i) % len(resnet)][0]["images"].shape[0]
                        for t in range(threads) for i in range(per_thread))
        res.check("batching: every request and row counted once",
                  d["requests"] == threads * per_thread and d["rows"] == sent_rows,
                  f"requests {d['requests']} (want {threads * per_thread}), rows {d['rows']} "
                  f"(want {sent_rows})")
        res.check("batching: concurrent requests were merged (fewer runs than requests)",
                  0 < d["runs"] < d["requests"], f"{d['runs']} runs for {d['requests']} requests")
        rc = srv.stop()
        res.check("batching server exits 0 on SIGTERM", rc == 0, "" if rc == 0 else srv.log_tail(5))


def check_bf16(res, args):
    """--precision bf16 serves what `sampan infer --precision bf16` computes, bit for bit (the same
    graph and kernels; rows and threads do not change a result), within bf16 bounds of the f32
    reference; the server's log names the precision."""
    resnet = load_cases(args, "resnet_tiny")
    ins, want = resnet[0]
    work = os.path.join(args.work_dir, "bf16_cli")
    os.makedirs(work, exist_ok=True)
    argv = ["infer", "--model", os.path.join(classic_dir(args), "resnet_tiny.onnx"),
            "--output-dir", work, "--precision", "bf16", "--threads", "1"]
    for name, a in ins.items():
        path = os.path.join(work, f"{name}.npy")
        np.save(path, a)
        argv += ["--input", f"{name}={path}"]
    run = eu.run_sampan(args, argv)
    if not res.check("bf16: `sampan infer --precision bf16` runs", run.returncode == 0,
                     "" if run.returncode == 0 else run.describe()):
        return
    cli = {n: np.load(os.path.join(work, f"{n}.npy")) for n in want}
    with serve(args, "resnet_tiny", ["--precision", "bf16"]) as srv:
        status, got, _ = infer_http(srv, "resnet_tiny", ins, binary_in=True, binary_out=True)
        ok = status == 200 and isinstance(got, dict) and all(
            n in got and np.array_equal(np.asarray(got[n]).reshape(cli[n].shape), cli[n]) for n in cli)
        res.check("bf16: served outputs equal `sampan infer --precision bf16` exactly", ok,
                  f"status {status}: {str(got)[:200]}")
        if ok:
            ok, detail = outputs_agree(got, want, cos_min=BF16_COS_MIN, rel_max=BF16_REL_MAX)
            res.check("bf16: served outputs agree with the f32 reference", ok, detail)
            differs = any(not np.array_equal(np.asarray(got[n]).reshape(want[n].shape), want[n])
                          for n in want)
            res.check("bf16: served outputs differ from f32 (the precision took effect)", differs,
                      "" if differs else "identical to the f32 reference")
        rc = srv.stop()
        res.check("bf16 server exits 0 on SIGTERM", rc == 0, "" if rc == 0 else srv.log_tail(5))
    run = eu.run_sampan(args, ["serve", "--model", os.path.join(classic_dir(args), "resnet_tiny.onnx"),
                               "--precision", "fp16", "--http-port", "0", "--grpc-port", "-1"])
    last = run.last_stderr_line()
    res.check("--precision fp16 is refused in one line naming the key",
              run.returncode is not None and run.returncode > 0 and last.startswith("error: ")
              and "precision" in last and "fp16" in last, last)


def main():
    args = eu.parse_args(__doc__)
    res = eu.Results()
    eu.require_binary(args, res)
    try:
        import tritonclient.grpc as tc  # noqa: F401
        import grpc  # noqa: F401
    except ImportError as e:
        res.check("python packages grpcio and tritonclient[grpc]", False, str(e))
        res.finish()
    import tritonclient.grpc as tc

    bert = load_cases(args, "bert_tiny")
    with serve(args, "bert_tiny") as srv:
        client = tc.InferenceServerClient(srv.grpc_addr)
        try:
            check_metadata(res, srv, client, "bert_tiny", [
                ("in", "input_ids", "INT64", [-1, -1]),
                ("in", "attention_mask", "INT64", [-1, -1]),
                ("in", "token_type_ids", "INT64", [-1, -1]),
                ("out", "last_hidden_state", "FP32", [-1, -1, 64]),
                ("out", "pooler_output", "FP32", [-1, 64])])
            check_correct(res, srv, client, "bert_tiny", bert)
            check_bert_errors(res, srv, client, bert)
            check_llm_endpoints(res, srv, "bert_tiny")
            check_stream_infer(res, srv, "bert_tiny", bert[0][0])
            check_concurrent(res, srv, "bert_tiny", bert)
            # Tensor infers are counted with every request, by API and status.
            m = su.metrics(srv.http_url)
            rest_ok = su.metric_value(m, "sampan:requests_total", api="kserve_rest", code="200")
            rest_400 = su.metric_value(m, "sampan:requests_total", api="kserve_rest", code="400")
            grpc_ok = su.metric_value(m, "sampan:requests_total", api="grpc", code="0")
            grpc_400 = su.metric_value(m, "sampan:requests_total", api="grpc", code="3")
            res.check("metrics count the infers by API and status",
                      rest_ok >= 30 and rest_400 >= 10 and grpc_ok >= 20 and grpc_400 >= 5,
                      f"REST 200 {rest_ok}, 400 {rest_400}; gRPC OK {grpc_ok}, "
                      f"INVALID_ARGUMENT {grpc_400}")
        finally:
            client.close()
        rc = srv.stop()
        res.check("bert_tiny server exits 0 on SIGTERM", rc == 0, "" if rc == 0 else srv.log_tail(5))

    resnet = load_cases(args, "resnet_tiny")
    with serve(args, "resnet_tiny") as srv:
        client = tc.InferenceServerClient(srv.grpc_addr)
        try:
            check_metadata(res, srv, client, "resnet_tiny", [
                ("in", "images", "FP32", [-1, 3, -1, -1]),
                ("out", "logits", "FP32", [-1, 10])])
            check_correct(res, srv, client, "resnet_tiny", resnet)
            ins = resnet[0][0]
            bad = {"images": ins["images"][:, :2]}
            check_http_error(res, "resnet: HTTP fixed dimension mismatch names the input",
                             infer_http(srv, "resnet_tiny", bad), ["images", "3"])
            check_grpc_error(res, "resnet: gRPC fixed dimension mismatch names the input",
                             infer_grpc(client, "resnet_tiny", bad), ["images"])

            def as_fp64(header, binary):
                header["inputs"][0]["datatype"] = "FP64"
                return header, binary, {}
            check_http_error(res, "resnet: HTTP unsupported datatype names the input",
                             infer_http(srv, "resnet_tiny", ins, override=as_fp64),
                             ["images", "FP64"])
            check_concurrent(res, srv, "resnet_tiny", resnet)
        finally:
            client.close()
        rc = srv.stop()
        res.check("resnet_tiny server exits 0 on SIGTERM", rc == 0, "" if rc == 0 else srv.log_tail(5))
    check_dynamic_batching(res, args)
    check_bf16(res, args)
    res.finish()


if __name__ == "__main__":
    main()
