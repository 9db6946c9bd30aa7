"""End-to-end: `sampan serve` operations — cancellation, overload, shutdown, auth, TLS, config,
health and logs — checked from the outside with real clients (http.client, openai,
tritonclient).

- a client that disconnects mid-stream frees its KV blocks (kv_cache_blocks_used back to 0,
  request_finished_total{finish_reason="cancelled"} grows);
- a full queue (--max-running 1 --max-waiting 2) refuses at once: HTTP 429 and gRPC
  RESOURCE_EXHAUSTED in < 1 s, readiness stays 200, a later request succeeds;
- SIGTERM: the in-flight stream completes, new connections are refused (or 503), exit 0; with
  --shutdown-grace 1 long requests are cancelled and the process still exits 0 promptly;
- --api-key: 401 without or with a wrong key (HTTP and gRPC), 200 with it, probes public;
- --tls-cert/--tls-key: HTTPS and gRPC TLS work with the self-signed certificate as CA;
- --config configs/serve-small-cpu.yaml starts; liveness 200 while readiness may still be 503;
- structured (JSON) logs carry the X-Request-Id the client sent.
"""

import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402
import serve_util as su  # noqa: E402

MODEL = "serve-model"
# The serve model's context is 2048 tokens; at ~1-2 k tokens/s on this machine a request of
# LONG tokens keeps a sequence busy for a second or more, long enough to observe it running.
LONG = 2000
API_KEY = "sk-loadtests-0123456789"


def body(prompt="Once upon a time", max_tokens=8, stream=False, **kw):
    b = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
         "ignore_eos": True, "stream": stream}
    if stream:
        b["stream_options"] = {"include_usage": True}
    b.update(kw)
    return b


class OpenStream:
    """A streaming completion whose response headers have arrived; read or drop it later."""

    def __init__(self, srv, req_body, headers=None):
        self.conn = http.client.HTTPConnection("127.0.0.1", srv.http_port, timeout=120)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        self.conn.request("POST", "/v1/completions", json.dumps(req_body).encode(), h)
        self.resp = None  # read lazily: a queued request may get its headers only when it runs

    @property
    def status(self):
        if self.resp is None:
            self.resp = self.conn.getresponse()
        return self.resp.status

    def read_events(self, n=None):
        """Reads `n` data events (all when None) -> list of payloads."""
        if self.status != 200:
            return [self.resp.read().decode(errors="replace")]
        out, data = [], []
        while n is None or len(out) < n:
            line = self.resp.readline()
            if not line:
                break
            line = line.decode().rstrip("\r\n")
            if line.startswith("data:"):
                data.append(line[5:].strip())
            elif line == "" and data:
                p = "\n".join(data)
                data = []
                out.append(p if p == "[DONE]" else json.loads(p))
        return out

    def drop(self):
        # An abrupt close (RST), like a client process that dies mid-stream.
        try:
            self.conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                      b"\x01\x00\x00\x00\x00\x00\x00\x00")
        except (OSError, AttributeError):
            pass
        self.conn.close()


def wait_for(pred, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    return pred()


def gauge(srv, name):
    return su.metric_value(su.metrics(srv.http_url), name)


def finish_of(events):
    for ev in events:
        if isinstance(ev, dict):
            for ch in ev.get("choices") or []:
                if ch.get("finish_reason"):
                    return ch["finish_reason"]
    return None


def usage_of(events):
    for ev in reversed(events):
        if isinstance(ev, dict) and ev.get("usage"):
            return ev["usage"]
    return None


def check_readiness_during_start(res, args, model_dir):
    """Polls both probes from the moment the process starts."""
    srv = su.Server(args, model_dir, ["--log-format", "json"], env={"SAMPAN_LOG_LEVEL": "info"})
    srv.start()
    seen_ready, live_ok, t0 = [], False, time.monotonic()
    while time.monotonic() - t0 < 180 and srv.proc.poll() is None:
        try:
            st_live, _, _ = su.http_json("GET", srv.http_url + "/v2/health/live", timeout=5)
            live_ok = live_ok or st_live == 200
            st, _, _ = su.http_json("GET", srv.http_url + "/v2/health/ready", timeout=5)
            seen_ready.append(st)
            if st == 200:
                break
        except OSError:
            time.sleep(0.01)
    res.check("health: liveness 200", live_ok)
    ok = bool(seen_ready) and seen_ready[-1] == 200 and all(s in (200, 503) for s in seen_ready)
    n503 = seen_ready.count(503)
    res.check("health: readiness 503 while loading (if observed), then 200", ok,
              f"{n503} x 503 before 200" if n503 else "load too quick to observe 503")
    return srv


def check_request_id_logs(res, srv):
    rid = "lt-req-7f3a9c21"
    st, b, h = su.http_json("POST", srv.http_url + "/v1/completions", body(max_tokens=4),
                            headers={"X-Request-Id": rid})
    res.check("request with X-Request-Id served", st == 200, f"{st} {b}")
    lines = wait_for(lambda: [ln for ln in srv.log_text().splitlines() if rid in ln], 5)
    parsed = []
    for ln in lines or []:
        try:
            parsed.append(json.loads(ln[ln.index("{"):]))
        except ValueError:
            pass
    res.check("logs: the X-Request-Id appears in the server log", bool(lines),
              f"{len(lines or [])} lines; response id {b.get('id') if isinstance(b, dict) else ''}")
    res.check("logs: --log-format json lines carrying it are JSON objects",
              bool(parsed) and len(parsed) == len(lines), (lines or [""])[0][:200])


def check_disconnect(res, srv):
    m0 = su.metrics(srv.http_url)
    s = OpenStream(srv, body(max_tokens=LONG, stream=True))
    first = s.read_events(3)
    used = gauge(srv, "sampan:kv_cache_blocks_used")
    res.check("disconnect: stream started and holds KV blocks", s.status == 200 and len(first) == 3
              and used > 0, f"status {s.status}, blocks used {used}")
    t0 = time.monotonic()
    s.drop()
    freed = wait_for(lambda: gauge(srv, "sampan:kv_cache_blocks_used") == 0, 10)
    dt = time.monotonic() - t0
    m1 = su.metrics(srv.http_url)
    d = lambda reason: (su.metric_value(m1, "sampan:request_finished_total", finish_reason=reason)
                        - su.metric_value(m0, "sampan:request_finished_total",
                                          finish_reason=reason))
    res.check("disconnect: kv_cache_blocks_used returns to 0", freed, f"after {dt:.2f} s")
    res.check("disconnect: request_finished_total{finish_reason=cancelled} grew by 1 "
              "(and not counted as length)", d("cancelled") == 1 and d("length") == 0,
              f"cancelled +{d('cancelled')}, length +{d('length')}")
    st, b, _ = su.http_json("POST", srv.http_url + "/v1/completions", body(max_tokens=4))
    res.check("disconnect: server keeps serving", st == 200, f"{st}")


def grpc_infer(addr, max_tokens=4, headers=None, ssl_on=False, root_certificates=None,
               timing=None):
    """One KServe ModelInfer over tritonclient -> (ok, text or 'StatusCode.X: message').

    `timing` (a dict), if given, gets "s": the seconds of the call alone, measured after a
    liveness RPC has set the channel up.
    """
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException
    client = grpcclient.InferenceServerClient(url=addr, ssl=ssl_on,
                                              root_certificates=root_certificates)
    try:
        text = grpcclient.InferInput("text_input", [1], "BYTES")
        text.set_data_from_numpy(np.array([b"Once upon a time"], dtype=object))
        mt = grpcclient.InferInput("max_tokens", [1], "INT32")
        mt.set_data_from_numpy(np.array([max_tokens], dtype=np.int32))
        if timing is not None:
            client.is_server_live()
        t0 = time.monotonic()
        try:
            r = client.infer(MODEL, [text, mt], headers=headers, client_timeout=60)
        finally:
            if timing is not None:
                timing["s"] = time.monotonic() - t0
        out = r.as_numpy("text_output")
        return True, out[0].decode() if out is not None else ""
    except InferenceServerException as e:
        return False, f"{e.status()}: {e.message()}"
    finally:
        client.close()


def check_overload(res, args, model_dir):
    with su.Server(args, model_dir, ["--max-running", "1", "--max-waiting", "2"]) as srv:
        def long_stream(i):
            return OpenStream(srv, body(prompt=f"Long story number {i}", max_tokens=LONG,
                                        stream=True))

        def running_waiting():
            m = su.metrics(srv.http_url)
            return (su.metric_value(m, "sampan:num_requests_running"),
                    su.metric_value(m, "sampan:num_requests_waiting"))

        # One at a time: requests that arrive together all wait until the engine's next step
        # admits one, so a third could be refused before the first runs.
        streams = [long_stream(0)]
        wait_for(lambda: running_waiting() == (1, 0), 10, interval=0.01)
        streams += [long_stream(1), long_stream(2)]
        full = wait_for(lambda: running_waiting() == (1, 2), 10, interval=0.01)
        res.check("overload: 1 running + 2 waiting", full, f"{running_waiting()}")
        t0 = time.monotonic()
        st, b, _ = su.http_json("POST", srv.http_url + "/v1/completions", body(max_tokens=4))
        dt = time.monotonic() - t0
        res.check("overload: HTTP 429 with a JSON error", st == 429 and isinstance(b, dict)
                  and "error" in b, f"{st} {b}")
        res.check("overload: refused at once (< 1 s)", dt < 1.0, f"{dt * 1000:.0f} ms")
        timing = {}
        ok, msg = grpc_infer(srv.grpc_addr, timing=timing)
        dt = timing.get("s", float("inf"))
        res.check("overload: gRPC ModelInfer -> RESOURCE_EXHAUSTED at once",
                  not ok and "RESOURCE_EXHAUSTED" in msg and dt < 1.0,
                  f"{msg[:160]} in {dt * 1000:.0f} ms")
        st, _, _ = su.http_json("GET", srv.http_url + "/v2/health/ready")
        res.check("overload: /v2/health/ready stays 200", st == 200, f"{st}")
        for s in streams:
            s.drop()
        idle = wait_for(lambda: running_waiting() == (0, 0), 20)
        st, b, _ = su.http_json("POST", srv.http_url + "/v1/completions", body(max_tokens=4))
        res.check("overload: after the queue drains a request succeeds", idle and st == 200,
                  f"idle {idle}, {st}")
        # n choices are n engine requests: with room for 2 waiting, n = 2 is served and n = 4
        # is refused as a whole (429), its first choices cancelled; then the queue is empty.
        st, b, _ = su.http_json("POST", srv.http_url + "/v1/completions",
                                body(max_tokens=4, n=2))
        res.check("overload: n = 2 fits the queue (2 choices)",
                  st == 200 and len(b.get("choices", [])) == 2, f"{st} {str(b)[:200]}")
        st, b, _ = su.http_json("POST", srv.http_url + "/v1/completions",
                                body(max_tokens=LONG, n=4))
        res.check("overload: n = 4 past the queue -> one 429 JSON error", st == 429
                  and isinstance(b, dict) and "error" in b, f"{st} {str(b)[:200]}")
        idle = wait_for(lambda: running_waiting() == (0, 0), 20)
        st, b, _ = su.http_json("POST", srv.http_url + "/v1/completions", body(max_tokens=4))
        res.check("overload: the refused n = 4 left nothing running or waiting",
                  idle and st == 200, f"idle {idle} {running_waiting()}, {st}")
        m = su.metrics(srv.http_url)
        res.check("overload: requests_total{code=429} counted",
                  su.metric_value(m, "sampan:requests_total", code="429") >= 1)


def stream_in_thread(srv, req_body, out, key):
    def run():
        try:
            out[key] = su.sse_events(srv.http_url + "/v1/completions", req_body)
        except Exception as e:
            out[key] = e
    t = threading.Thread(target=run)
    t.start()
    return t


def check_graceful_shutdown(res, args, model_dir):
    # The stream is in flight when SIGTERM arrives (two events read); it need not be long. The
    # grace is generous so that a loaded machine cannot turn "finish" into "cancel".
    n_tokens, grace = 400, 120
    srv = su.Server(args, model_dir, ["--shutdown-grace", str(grace)]).start()
    srv.wait_ready()
    keep = http.client.HTTPConnection("127.0.0.1", srv.http_port, timeout=30)
    keep.request("GET", "/v2/health/ready")
    r = keep.getresponse()
    r.read()
    s = OpenStream(srv, body(max_tokens=n_tokens, stream=True))
    events = s.read_events(2)
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    try:
        st, _, _ = su.http_json("POST", srv.http_url + "/v1/completions", body(max_tokens=4),
                                timeout=10)
        new_conn = f"status {st}"
        refused = st == 503
    except OSError as e:
        new_conn, refused = f"{type(e).__name__}", True
    try:
        keep.request("GET", "/v2/health/ready")
        r = keep.getresponse()
        r.read()
        ready_after = f"status {r.status}"
        not_ready = r.status == 503
    except (OSError, http.client.HTTPException) as e:
        ready_after, not_ready = f"{type(e).__name__}", True
    events += s.read_events()
    try:
        rc = srv.proc.wait(timeout=grace + 10)
    except subprocess.TimeoutExpired:
        rc = None
    dt = time.monotonic() - t0
    srv.stop(timeout=10)
    u = usage_of(events)
    res.check("shutdown: in-flight stream completes fully after SIGTERM",
              events and events[-1] == "[DONE]" and finish_of(events) == "length"
              and u and u["completion_tokens"] == n_tokens,
              f"{len(events)} events, finish {finish_of(events)}, usage {u}")
    res.check("shutdown: new connections refused or 503 while draining", refused, new_conn)
    res.check("shutdown: readiness no longer 200 on a kept-alive connection", not_ready,
              ready_after)
    res.check("shutdown: exits 0 within the grace period", rc == 0 and dt < grace,
              f"exit {rc} after {dt:.2f} s; log: {srv.log_tail(3)}")


def check_short_grace(res, args, model_dir):
    srv = su.Server(args, model_dir, ["--shutdown-grace", "1", "--max-running", "1"]).start()
    srv.wait_ready()
    out = {}
    threads = [stream_in_thread(srv, body(prompt=f"Very long tale {i}", max_tokens=LONG,
                                          stream=True), out, i) for i in range(4)]
    wait_for(lambda: gauge(srv, "sampan:num_requests_running") == 1, 10)
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    try:
        rc = srv.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        rc = None
    dt = time.monotonic() - t0
    for t in threads:
        t.join(timeout=30)
    srv.stop(timeout=10)
    finishes = [finish_of(out[i]) if isinstance(out.get(i), list) else type(out.get(i)).__name__
                for i in range(4)]
    # Four requests of LONG tokens one at a time take several seconds; a 1 s grace cannot
    # finish them, so at least one must have been cut short.
    res.check("shutdown --shutdown-grace 1: exits 0 soon after the grace, cancelling the rest",
              rc == 0 and dt < 1 + 8 and any(f != "length" for f in finishes),
              f"exit {rc} after {dt:.2f} s; finishes {finishes}")


def check_auth(res, args, model_dir):
    import openai
    with su.Server(args, model_dir, ["--api-key", API_KEY]) as srv:
        url = srv.http_url + "/v1/completions"
        st, b, _ = su.http_json("POST", url, body())
        res.check("auth: no key -> 401 with a JSON error", st == 401 and isinstance(b, dict)
                  and "error" in b, f"{st} {b}")
        st, b, _ = su.http_json("POST", url, body(),
                                headers={"Authorization": "Bearer wrong-key"})
        res.check("auth: wrong key -> 401", st == 401, f"{st}")
        st, b, _ = su.http_json("POST", url, body(), headers={"Authorization": API_KEY})
        res.check("auth: key without 'Bearer' -> 401", st == 401, f"{st}")
        for path in ("/v2/health/live", "/v2/health/ready", "/metrics"):
            st, _, _ = su.http_json("GET", srv.http_url + path)
            res.check(f"auth: {path} public", st == 200, f"{st}")
        client = openai.OpenAI(base_url=srv.http_url + "/v1", api_key=API_KEY, max_retries=0)
        try:
            c = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=5,
                                          temperature=0)
            ch = client.chat.completions.create(model=MODEL, max_tokens=5, temperature=0,
                                                messages=[{"role": "user", "content": "Hi"}])
            ok = c.usage.completion_tokens >= 1 and ch.choices[0].message.role == "assistant"
            res.check("auth: openai client with api_key: completion and chat", ok,
                      f"{c.choices[0].text!r}")
        except Exception as e:
            res.check("auth: openai client with api_key: completion and chat", False, repr(e))
        bad = openai.OpenAI(base_url=srv.http_url + "/v1", api_key="nope", max_retries=0)
        try:
            bad.models.list()
            res.check("auth: openai client with a wrong key -> AuthenticationError", False)
        except openai.AuthenticationError as e:
            res.check("auth: openai client with a wrong key -> AuthenticationError", True,
                      str(e)[:80])
        except Exception as e:
            res.check("auth: openai client with a wrong key -> AuthenticationError", False,
                      repr(e))
        ok, msg = grpc_infer(srv.grpc_addr)
        res.check("auth: gRPC without key -> UNAUTHENTICATED", not ok
                  and "UNAUTHENTICATED" in msg, msg[:120])
        ok, msg = grpc_infer(srv.grpc_addr, headers={"authorization": f"Bearer {API_KEY}"})
        res.check("auth: gRPC with the key in metadata -> served", ok, msg[:120])


def make_cert(args):
    d = os.path.join(args.work_dir, "tls")
    os.makedirs(d, exist_ok=True)
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    return cert, key


def check_tls(res, args, model_dir):
    import tritonclient.grpc as grpcclient
    cert, key = make_cert(args)
    ctx = ssl.create_default_context(cafile=cert)
    srv = su.Server(args, model_dir, ["--tls-cert", cert, "--tls-key", key]).start()
    try:
        srv.wait_ready(scheme="https", ssl_context=ctx)
        https = f"https://127.0.0.1:{srv.http_port}"
        st, b, _ = su.http_json("POST", https + "/v1/completions", body(max_tokens=4),
                                ssl_context=ctx)
        res.check("tls: HTTPS completion with the self-signed cert as CA", st == 200,
                  f"{st} {b if st != 200 else ''}")
        ev = su.sse_events(https + "/v1/completions", body(max_tokens=4, stream=True),
                           ssl_context=ctx)
        res.check("tls: HTTPS streaming", ev and ev[-1] == "[DONE]", f"{len(ev)} events")
        try:
            st, _, _ = su.http_json("GET", srv.http_url + "/v2/health/ready", timeout=5)
            plain = f"status {st}"
        except (OSError, http.client.HTTPException) as e:
            st, plain = None, type(e).__name__
        res.check("tls: plain HTTP on the HTTPS port is not served", st != 200, plain)
        c = grpcclient.InferenceServerClient(url=srv.grpc_addr, ssl=True, root_certificates=cert)
        try:
            ready = c.is_server_ready()
        except Exception as e:
            ready = repr(e)
        c.close()
        res.check("tls: gRPC with ssl=True and the cert as root -> server ready", ready is True,
                  str(ready)[:120])
        ok, msg = grpc_infer(srv.grpc_addr, ssl_on=True, root_certificates=cert)
        res.check("tls: gRPC ModelInfer over TLS", ok, msg[:120])
    except RuntimeError as e:
        res.check("tls: server starts with --tls-cert/--tls-key", False, str(e))
    finally:
        rc = srv.stop()
        res.check("tls: server exits 0", rc == 0, f"exit {rc}")


def check_config(res, args, model_dir):
    path = os.path.join(args.source_dir, "configs", "serve-small-cpu.yaml")
    if not res.check("config: configs/serve-small-cpu.yaml exists", os.path.isfile(path), path):
        return
    srv = su.Server(args, model_dir, ["--config", path]).start()
    try:
        srv.wait_ready()
        # The file may rename the served model (served-model-name); ask for it.
        _, models, _ = su.http_json("GET", srv.http_url + "/v1/models")
        name = models["data"][0]["id"]
        st, b, _ = su.http_json("POST", srv.http_url + "/v1/completions",
                                body(max_tokens=4, model=name))
        res.check(f"config: --config serve-small-cpu.yaml starts and serves '{name}'", st == 200,
                  f"{st} {b if st != 200 else ''}")
    except RuntimeError as e:
        res.check("config: --config serve-small-cpu.yaml starts and serves", False, str(e))
    finally:
        rc = srv.stop()
        res.check("config: server exits 0", rc == 0, f"exit {rc}")


def main():
    args = eu.parse_args(__doc__.split("\n")[0])
    res = eu.Results()
    eu.require_binary(args, res)
    model_dir = su.make_serve_model(args)
    srv = check_readiness_during_start(res, args, model_dir)
    steps = [
        lambda: check_request_id_logs(res, srv),
        lambda: check_disconnect(res, srv),
        lambda: res.check("server (json logs) exits 0", srv.stop() == 0, srv.log_tail(3)),
        lambda: check_overload(res, args, model_dir),
        lambda: check_graceful_shutdown(res, args, model_dir),
        lambda: check_short_grace(res, args, model_dir),
        lambda: check_auth(res, args, model_dir),
        lambda: check_tls(res, args, model_dir),
        lambda: check_config(res, args, model_dir),
    ]
    for step in steps:
        try:
            step()
        except Exception as e:  # one broken feature must not hide the others
            import traceback
            res.check("no unexpected exception", False,
                      f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}")
    srv.stop()
    res.finish()


if __name__ == "__main__":
    main()
