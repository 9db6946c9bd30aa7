"""End-to-end: bad input to `sampan serve` is refused cleanly and never hurts the server.

Over HTTP each bad request gets a 4xx whose JSON error body names the offending field, and the
server keeps serving (the same good request gives the same answer before and after): invalid
JSON, wrong types, unknown model (404), a prompt longer than the context, max_tokens <= 0, a body
over --max-body-bytes (413), bad auth (401), unknown routes (404), garbage bytes and a half-sent
request on raw sockets. Over gRPC (tritonclient) bad requests get INVALID_ARGUMENT / NOT_FOUND.
Bad `sampan serve` invocations (missing model dir, port in use, bad config) exit non-zero with
one "error:" line. Also run under ASan+UBSan (test_bad_*).
"""

import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402
import serve_util as su  # noqa: E402

MODEL = "serve-model"
KEY = "sk-bad-serve-test"
AUTH = {"Authorization": f"Bearer {KEY}"}
# Large enough for the 200 KB nesting attack below (a body past the limit is refused with 413
# before parsing, which would hide what the JSON parser does).
MAX_BODY = 400 * 1024
MAX_LEN = 128


def good_completion():
    return {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}


def error_names(body, field):
    """True when `body` is a JSON error and names `field` (in param or message).

    OpenAI routes answer {"error": {"message", "type", "param", "code"}}; KServe v2 REST routes
    answer {"error": "<message>"} as that protocol specifies.
    """
    if not isinstance(body, dict):
        return False
    err = body.get("error")
    if isinstance(err, str):
        err = {"message": err}
    if not isinstance(err, dict) or not err.get("message"):
        return False
    return field is None or field in (err.get("param") or "") or field in err["message"]


def still_serving(srv):
    try:
        st, _, _ = su.http_json("GET", srv.http_url + "/v2/health/ready", timeout=30)
        return srv.proc.poll() is None and st == 200
    except OSError:
        return False


def http_cases():
    """(name, method, path, body, headers, expected status, field the error must name)."""
    c = "/v1/completions"
    ch = "/v1/chat/completions"
    gc = good_completion()
    chat = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
    long_prompt = " ".join(["word"] * (MAX_LEN * 2))
    return [
        ("invalid JSON", "POST", c, '{"model": "serve-model", "prompt": ', AUTH, 400, None),
        ("body not an object", "POST", c, "[1, 2, 3]", AUTH, 400, None),
        ("empty body", "POST", c, "", AUTH, 400, None),
        ("max_tokens 'ten'", "POST", c, {**gc, "max_tokens": "ten"}, AUTH, 400, "max_tokens"),
        ("max_tokens 0", "POST", c, {**gc, "max_tokens": 0}, AUTH, 400, "max_tokens"),
        ("max_tokens -1", "POST", c, {**gc, "max_tokens": -1}, AUTH, 400, "max_tokens"),
        ("max_tokens 2.5", "POST", c, {**gc, "max_tokens": 2.5}, AUTH, 400, "max_tokens"),
        ("temperature 'hot'", "POST", c, {**gc, "temperature": "hot"}, AUTH, 400, "temperature"),
        ("temperature -1", "POST", c, {**gc, "temperature": -1}, AUTH, 400, "temperature"),
        ("top_p 2", "POST", c, {**gc, "top_p": 2}, AUTH, 400, "top_p"),
        ("stop 5", "POST", c, {**gc, "stop": 5}, AUTH, 400, "stop"),
        ("stream 'yes'", "POST", c, {**gc, "stream": "yes"}, AUTH, 400, "stream"),
        ("n 0", "POST", c, {**gc, "n": 0}, AUTH, 400, "n"),
        ("n 129", "POST", c, {**gc, "n": 129}, AUTH, 400, "n"),
        ("prompt missing", "POST", c, {"model": MODEL, "max_tokens": 4}, AUTH, 400, "prompt"),
        ("prompt 42", "POST", c, {**gc, "prompt": 42}, AUTH, 400, "prompt"),
        ("token id out of vocabulary", "POST", c, {**gc, "prompt": [1, 99999999]}, AUTH, 400,
         "prompt"),
        ("prompt longer than the context", "POST", c, {**gc, "prompt": long_prompt}, AUTH, 400,
         "prompt"),
        ("unknown model", "POST", c, {**gc, "model": "no-such-model"}, AUTH, 404, "model"),
        ("chat: messages not a list", "POST", ch, {**chat, "messages": "Hi"}, AUTH, 400,
         "messages"),
        ("chat: message without role", "POST", ch, {**chat, "messages": [{"content": "Hi"}]},
         AUTH, 400, "messages"),
        ("chat: content 7", "POST", ch,
         {**chat, "messages": [{"role": "user", "content": 7}]}, AUTH, 400, "messages"),
        ("chat: message not an object", "POST", ch, {**chat, "messages": [5]}, AUTH, 400,
         "messages"),
        ("chat: max_tokens 0", "POST", ch, {**chat, "max_tokens": 0}, AUTH, 400, "max_tokens"),
        ("chat: unknown model", "POST", ch, {**chat, "model": "nope"}, AUTH, 404, "model"),
        ("body over --max-body-bytes", "POST", c, {**gc, "prompt": "x" * (MAX_BODY * 4)}, AUTH,
         413, None),
        ("no Authorization", "POST", c, gc, {}, 401, None),
        ("wrong key", "POST", c, gc, {"Authorization": "Bearer not-the-key"}, 401, None),
        ("malformed Authorization", "POST", c, gc, {"Authorization": "Basic Zm9vOmJhcg=="}, 401,
         None),
        ("unknown route", "GET", "/v1/nothing-here", None, AUTH, 404, None),
        ("unknown route (POST)", "POST", "/v3/infer", gc, AUTH, 404, None),
        ("kserve: unknown model ready", "GET", "/v2/models/nope/ready", None, AUTH, 404, None),
        ("kserve: infer invalid JSON", "POST", f"/v2/models/{MODEL}/infer", "{oops", AUTH, 400,
         None),
        ("kserve: infer without inputs", "POST", f"/v2/models/{MODEL}/infer", {"id": "x"}, AUTH,
         400, "inputs"),
        ("kserve: shape disagrees with data", "POST", f"/v2/models/{MODEL}/infer",
         {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [2], "data": ["hi"]}]},
         AUTH, 400, "text_input"),
        ("kserve: shape overflows", "POST", f"/v2/models/{MODEL}/infer",
         {"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [2 ** 62, 8],
                      "data": [1]}]}, AUTH, 400, "input_ids"),
        ("kserve: input given twice", "POST", f"/v2/models/{MODEL}/infer",
         {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["a"]},
                     {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["b"]}]},
         AUTH, 400, "text_input"),
        ("kserve: body nested 100,000 deep", "POST", f"/v2/models/{MODEL}/infer",
         '{"inputs": ' + "[" * 100000 + "]" * 100000 + "}", AUTH, 400, "inputs"),
        # The crash this server once had: a chat message with an extra field holding an array
        # nested 100,000 deep (about 200 KB) overflowed the stack when the message was copied.
        ("chat: extra field nested 100,000 deep", "POST", ch,
         '{"model": "serve-model", "messages": [{"role": "user", "content": "Hi", "extra": '
         + "[" * 100000 + "]" * 100000 + "}]}", AUTH, 400, "messages"),
        ("completion: unknown field of objects nested 60,000 deep", "POST", c,
         '{"prompt": "Hi", "extra": ' + '{"a":' * 60000 + "1" + "}" * 60000 + "}", AUTH, 400,
         "extra"),
        ("chat: tools 'x'", "POST", ch, {**chat, "tools": "x"}, AUTH, 400, "tools"),
        ("chat: tool without a function", "POST", ch,
         {**chat, "tools": [{"type": "function"}]}, AUTH, 400, "tools[0].function"),
        ("chat: tool_choice required", "POST", ch, {**chat, "tool_choice": "required"}, AUTH, 400,
         "tool_choice"),
        ("chat: response_format json_schema without a name", "POST", ch,
         {**chat, "response_format": {"type": "json_schema", "json_schema": {}}}, AUTH, 400,
         "response_format.json_schema.name"),
        # Schemas are attacker input: what would make the grammar huge, deep, or endless is
        # refused before anything runs.
        ("chat: json_schema nested 200 deep", "POST", ch,
         {**chat, "response_format": {"type": "json_schema", "json_schema": {
             "name": "x", "schema": json.loads('{"items":' * 200 + "{}" + "}" * 200)}}}, AUTH,
         400, None),
        ("chat: json_schema maxLength 10^9", "POST", ch,
         {**chat, "response_format": {"type": "json_schema", "json_schema": {
             "name": "x", "schema": {"type": "string", "maxLength": 10**9}}}}, AUTH, 400,
         "response_format.json_schema.schema"),
        ("chat: json_schema of 300 strings of maxLength 4096 (too many rules)", "POST", ch,
         {**chat, "response_format": {"type": "json_schema", "json_schema": {
             "name": "x", "schema": {"type": "object", "properties": {
                 f"p{i}": {"type": "string", "minLength": 1, "maxLength": 4096}
                 for i in range(300)}}}}}, AUTH, 400, "response_format.json_schema.schema"),
        ("chat: json_schema pattern of a million states ((?:a{1000}){1000})", "POST", ch,
         {**chat, "response_format": {"type": "json_schema", "json_schema": {
             "name": "x", "schema": {"type": "string", "pattern": "(?:a{1000}){1000}"}}}}, AUTH,
         400, "response_format.json_schema.schema"),
        ("chat: json_schema pattern of 30 loops under maxLength 4096 (too many rules)", "POST",
         ch, {**chat, "response_format": {"type": "json_schema", "json_schema": {
             "name": "x", "schema": {"type": "string", "pattern": "^" + "[a-z]*[0-9]*" * 15 + "$",
                                     "maxLength": 4096}}}}, AUTH, 400,
         "response_format.json_schema.schema"),
        ("chat: json_schema pattern with a lookahead", "POST", ch,
         {**chat, "response_format": {"type": "json_schema", "json_schema": {
             "name": "x", "schema": {"type": "string", "pattern": "^(?=a)"}}}}, AUTH, 400,
         "response_format.json_schema.schema"),
        ("chat: json_schema whose instances never end", "POST", ch,
         {**chat, "response_format": {"type": "json_schema", "json_schema": {
             "name": "x", "schema": {"type": "object", "properties": {"a": {"$ref": "#"}},
                                     "required": ["a"]}}}}, AUTH, 400,
         "response_format.json_schema.schema"),
        ("chat: json_schema $ref to itself", "POST", ch,
         {**chat, "response_format": {"type": "json_schema", "json_schema": {
             "name": "x", "schema": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}}}, AUTH, 400,
         "response_format.json_schema.schema"),
        ("chat: json_schema $ref outside the document", "POST", ch,
         {**chat, "response_format": {"type": "json_schema", "json_schema": {
             "name": "x", "schema": {"$ref": "file:///etc/passwd"}}}}, AUTH, 400,
         "response_format.json_schema.schema"),
        ("chat: tool_choice required with a tool schema's pattern using a backreference", "POST",
         ch, {**chat, "tools": [{"type": "function", "function": {"name": "f", "parameters": {
             "type": "object", "properties": {"s": {"type": "string", "pattern": "(a)\\1"}}}}}],
          "tool_choice": "required"}, AUTH, 400, "tools[0].function.parameters"),
        ("chat: logit_bias key ' 5'", "POST", ch, {**chat, "logit_bias": {" 5": 10}}, AUTH, 400,
         "logit_bias"),
        ("chat: logit_bias id past the vocabulary", "POST", ch,
         {**chat, "logit_bias": {"2147483647": 10}}, AUTH, 400, "logit_bias"),
        ("chat: logit_bias of 10,000 keys, one past the vocabulary", "POST", ch,
         {**chat, "logit_bias": {**{str(i): -1 for i in range(9999)}, "40000": 1}}, AUTH, 400,
         "logit_bias"),
        ("chat: tool_calls not a list", "POST", ch,
         {**chat, "messages": [{"role": "assistant", "tool_calls": 3}]}, AUTH, 400,
         "messages[0].tool_calls"),
        ("chat: functions (deprecated)", "POST", ch, {**chat, "functions": []}, AUTH, 400,
         "functions"),
    ]


def check_attack_beside_a_stream(res, srv):
    """The nesting attack while another client streams: the stream ends normally ([DONE]), and
    a chat request with well-formed tools is still served."""
    events, errors = [], []

    def stream():
        try:
            events.extend(su.sse_events(srv.http_url + "/v1/completions",
                                        {**good_completion(), "max_tokens": 48, "stream": True,
                                         "ignore_eos": True}, headers=AUTH, timeout=300))
        except Exception as e:  # reported below
            errors.append(f"{type(e).__name__}: {e}")

    t = threading.Thread(target=stream)
    t.start()
    attack = ('{"messages": [{"role": "user", "content": "Hi", "extra": ' + "[" * 100000
              + "]" * 100000 + "}]}")
    st, b, _ = su.http_json("POST", srv.http_url + "/v1/chat/completions", attack, headers=AUTH)
    res.check("nesting attack during a stream: 400 naming 'messages'",
              st == 400 and error_names(b, "messages"), f"{st} {str(b)[:200]}")
    t.join(timeout=300)
    res.check("the stream beside the attack ends with [DONE]",
              not errors and events and events[-1] == "[DONE]", f"{errors} {events[-2:]}")
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "d",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    st, b, _ = su.http_json("POST", srv.http_url + "/v1/chat/completions",
                            {"model": MODEL, "max_tokens": 4, "tools": tools,
                             "tool_choice": "auto",
                             "messages": [{"role": "user", "content": "Weather in Paris?"},
                                          {"role": "assistant", "content": None, "tool_calls": [
                                              {"id": "c1", "type": "function", "function": {
                                                  "name": "get_weather",
                                                  "arguments": "{\"city\": \"Paris\"}"}}]},
                                          {"role": "tool", "tool_call_id": "c1",
                                           "content": "sunny"}]}, headers=AUTH)
    res.check("chat with tools and tool calls: 200", st == 200 and isinstance(b, dict)
              and b["choices"][0]["message"]["role"] == "assistant", f"{st} {str(b)[:200]}")


def check_http_cases(res, srv):
    for name, method, path, body, headers, want, field in http_cases():
        try:
            st, b, _ = su.http_json(method, srv.http_url + path, body, headers=headers,
                                    timeout=60)
        except OSError as e:
            res.check(f"http {name}: {want}", False, f"{type(e).__name__}: {e}")
            continue
        ok = st == want and error_names(b, field)
        shown = json.dumps(b)[:200] if isinstance(b, dict) else repr(b)[:200]
        what = f" naming '{field}'" if field else " with a JSON error"
        res.check(f"http {name}: {want}{what}", ok, f"{st} {shown}")
        if not still_serving(srv):
            res.check(f"server still serving after: {name}", False, srv.log_tail(10))
            return False
    return True


def raw_exchange(srv, payload, close_write=False, timeout=10):
    """Sends raw bytes; -> (first response line or '', seconds until reply/close)."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", srv.http_port), timeout=timeout) as s:
        s.sendall(payload)
        if close_write:
            s.shutdown(socket.SHUT_WR)
        data = b""
        try:
            while b"\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except (socket.timeout, ConnectionResetError):
            pass
    return data.split(b"\r\n")[0].decode(errors="replace"), time.monotonic() - t0


def check_raw_sockets(res, srv):
    cases = [
        ("garbage bytes", bytes(range(256)) * 4 + b"\r\n\r\n"),
        ("not HTTP", b"HELLO WORLD\r\n\r\n"),
        ("bad Content-Length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                               b"Content-Length: banana\r\n\r\n"),
        ("huge header", b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000
         + b"\r\n\r\n"),
    ]
    for name, payload in cases:
        try:
            line, dt = raw_exchange(srv, payload)
            detail = f"reply {line!r} after {dt:.2f} s"
            ok = not line.startswith("HTTP/1.1 2")
        except OSError as e:
            detail, ok = f"{type(e).__name__} (connection dropped)", True
        res.check(f"raw socket, {name}: no 2xx, server still serving",
                  ok and still_serving(srv), detail)
    # A request cut off mid-body, then the client goes away.
    try:
        with socket.create_connection(("127.0.0.1", srv.http_port), timeout=10) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nAuthorization: Bearer " + KEY.encode()
                      + b"\r\nContent-Length: 1000\r\n\r\n{\"model\": \"serve-")
    except OSError:
        pass
    res.check("half-sent request then close: server still serving", still_serving(srv))
    # Headers only, never finished, client closes: same.
    try:
        with socket.create_connection(("127.0.0.1", srv.http_port), timeout=10) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
    except OSError:
        pass
    res.check("half-sent headers then close: server still serving", still_serving(srv))


def check_grpc(res, srv):
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException
    client = grpcclient.InferenceServerClient(url=srv.grpc_addr)

    def infer(model, text, max_tokens, headers=AUTH, extra=()):
        inputs = []
        if text is not None:
            t = grpcclient.InferInput("text_input", [1], "BYTES")
            t.set_data_from_numpy(np.array([text.encode()], dtype=object))
            inputs.append(t)
        if max_tokens is not None:
            m = grpcclient.InferInput("max_tokens", [1], "INT32")
            m.set_data_from_numpy(np.array([max_tokens], dtype=np.int32))
            inputs.append(m)
        inputs += list(extra)
        try:
            r = client.infer(model, inputs, headers={k.lower(): v for k, v in headers.items()},
                             client_timeout=60)
            return "OK", r.as_numpy("text_output")
        except InferenceServerException as e:
            return str(e.status()), e.message()

    st, out = infer(MODEL, "Once upon a time", 4)
    res.check("grpc: a good ModelInfer is served", st == "OK", f"{st} {out}")
    cases = [
        ("unknown model", ("nope", "Hi", 4), "NOT_FOUND", "model"),
        ("max_tokens 0", (MODEL, "Hi", 0), "INVALID_ARGUMENT", "max_tokens"),
        ("max_tokens -1", (MODEL, "Hi", -1), "INVALID_ARGUMENT", "max_tokens"),
        ("no text_input", (MODEL, None, 4), "INVALID_ARGUMENT", "text_input"),
        ("prompt longer than the context", (MODEL, " ".join(["word"] * (MAX_LEN * 2)), 4),
         "INVALID_ARGUMENT", None),
    ]
    for name, a, want, field in cases:
        st, msg = infer(*a)
        ok = want in st and (field is None or field in str(msg))
        res.check(f"grpc {name}: {want}" + (f" naming '{field}'" if field else ""), ok,
                  f"{st}: {str(msg)[:150]}")
    st, msg = infer(MODEL, "Hi", 4, headers={})
    res.check("grpc without the key: UNAUTHENTICATED", "UNAUTHENTICATED" in st, f"{st}: {msg}")
    client.close()
    res.check("grpc: server still serving", still_serving(srv))


def check_bad_flags(res, args, model_dir):
    def one_error_line(r):
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        return (r.returncode is not None and r.returncode > 0 and len(lines) == 1
                and r.last_stderr_line().startswith("error:")), lines

    def case(name, argv, must_name=None):
        r = eu.run_sampan(args, ["serve"] + argv, timeout=120)
        ok, lines = one_error_line(r)
        if must_name and lines:
            # A name may be spelled as the flag (max-running) or the YAML key (max_running).
            ok = ok and all(any(alt in lines[0] for alt in (s, s.replace("_", "-")))
                            for s in must_name)
        res.check(f"serve {name}: exit > 0 with one 'error:' line"
                  + (f" naming {must_name}" if must_name else ""), ok,
                  lines[0] if ok else r.describe())

    p1, p2 = su.free_port(), su.free_port()
    base = ["--http-port", str(p1), "--grpc-port", str(p2), "--host", "127.0.0.1"]
    missing = os.path.join(args.work_dir, "no-such-model-dir")
    case("missing model dir", ["--model", missing] + base, [missing])
    case("no --model", base)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        case("HTTP port in use", ["--model", model_dir, "--http-port", str(port), "--grpc-port",
                                  str(p2), "--host", "127.0.0.1"], [str(port)])
        case("gRPC port in use", ["--model", model_dir, "--http-port", str(p1), "--grpc-port",
                                  str(port), "--host", "127.0.0.1"], [str(port)])
    cfg_dir = os.path.join(args.work_dir, "bad-configs")
    os.makedirs(cfg_dir, exist_ok=True)

    def cfg(name, text):
        path = os.path.join(cfg_dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    bad_key = cfg("bad-key.yaml", "max_running: 4\nno_such_setting: 3\n")
    case("config with an unknown key", ["--model", model_dir, "--config", bad_key] + base,
         ["no_such_setting", "bad-key.yaml"])
    bad_type = cfg("bad-type.yaml", "max_running: lots\n")
    case("config with a value of the wrong type", ["--model", model_dir, "--config", bad_type]
         + base, ["max_running", "bad-type.yaml"])
    bad_yaml = cfg("bad-yaml.yaml", "max_running: [1, 2\n")
    case("config that is not YAML", ["--model", model_dir, "--config", bad_yaml] + base,
         ["bad-yaml.yaml"])
    case("missing config file", ["--model", model_dir, "--config",
                                 os.path.join(cfg_dir, "absent.yaml")] + base, ["absent.yaml"])
    case("--max-running 0", ["--model", model_dir, "--max-running", "0"] + base,
         ["max-running"])
    case("--http-port 70000", ["--model", model_dir, "--http-port", "70000", "--grpc-port",
                               str(p2)])
    case("--tls-cert without --tls-key", ["--model", model_dir, "--tls-cert",
                                          os.path.join(cfg_dir, "bad-key.yaml")] + base)
    case("--kv-cache-bytes banana", ["--model", model_dir, "--kv-cache-bytes", "banana"] + base,
         ["kv-cache-bytes"])


def main():
    args = eu.parse_args(__doc__.split("\n")[0])
    res = eu.Results()
    eu.require_binary(args, res)
    model_dir = su.make_serve_model(args)
    srv = su.Server(args, model_dir, ["--api-key", KEY, "--max-body-bytes", str(MAX_BODY),
                                      "--max-model-len", str(MAX_LEN)])
    try:
        srv.start()
        srv.wait_ready(timeout=600)  # the sanitizer build loads slowly
    except RuntimeError as e:
        res.check("sampan serve starts", False, str(e))
        srv.stop()
        res.finish()
    try:
        st, before, _ = su.http_json("POST", srv.http_url + "/v1/completions", good_completion(),
                                     headers=AUTH)
        res.check("a good request before the bad ones", st == 200, f"{st} {before}")
        if check_http_cases(res, srv):
            check_attack_beside_a_stream(res, srv)
            check_raw_sockets(res, srv)
            check_grpc(res, srv)
        st, after, _ = su.http_json("POST", srv.http_url + "/v1/completions", good_completion(),
                                    headers=AUTH)
        res.check("the same good request after them: same answer", st == 200 and isinstance(
            before, dict) and after["choices"][0]["text"] == before["choices"][0]["text"],
            f"{st} {after}")
    except Exception as e:
        res.check("no unexpected exception", False, f"{type(e).__name__}: {e}\n" + srv.log_tail())
    rc = srv.stop()
    res.check("server exits 0 on SIGTERM after all that", rc == 0, f"exit {rc}\n"
              + (srv.log_tail(10) if rc else ""))
    check_bad_flags(res, args, model_dir)
    res.finish()


if __name__ == "__main__":
    main()
