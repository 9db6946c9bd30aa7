"""Helpers for the end-to-end tests that run `sampan serve` and talk to it as real clients do.

Only the standard library and prometheus_client: the tests must not depend on `requests`.
"""

import http.client
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

# Serving a 2-layer model loads in well under a second in Release; the allowance is for the
# Sanitize build on a busy 2-core machine.
READY_TIMEOUT_S = 180


def make_serve_model(args):
    """The serving test model's directory: the one CTest's fixture made in $SAMPAN_TEST_MODELS
    (shared by every test and build tree), else one built once per work dir."""
    shared = os.environ.get("SAMPAN_TEST_MODELS")
    out = os.path.join(shared or args.work_dir, "serve-model")
    if not os.path.exists(os.path.join(out, "serve_model.ok")):
        script = os.path.join(args.source_dir, "tests", "reference", "make_serve_model.py")
        subprocess.run([sys.executable, script, "--out", out], check=True,
                       stdout=subprocess.DEVNULL)
    return out


def free_port():
    # The port is released before the server binds it; a race with another process is possible
    # but rare enough on a test machine, and the server then fails loudly in wait_ready().
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_server_counter = itertools.count()


class Server:
    """One `sampan serve` process on loopback ports."""

    def __init__(self, args, model_dir, extra_args=(), env=None, http_port=None, grpc_port=None):
        self.args = args
        self.model_dir = model_dir
        self.extra_args = list(extra_args)
        self.env = env
        self.http_port = http_port if http_port is not None else free_port()
        self.grpc_port = grpc_port if grpc_port is not None else free_port()
        self.http_url = f"http://127.0.0.1:{self.http_port}"
        self.grpc_addr = f"127.0.0.1:{self.grpc_port}"
        n = next(_server_counter)
        self.log_path = os.path.join(args.work_dir, f"server-{os.getpid()}-{n}.log")
        self.proc = None
        self._log = None

    def argv(self):
        return [self.args.sampan, "serve", "--model", self.model_dir,
                "--http-port", str(self.http_port), "--grpc-port", str(self.grpc_port),
                "--host", "127.0.0.1"] + self.extra_args

    def start(self):
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.argv(), stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env)
        return self

    def wait_ready(self, timeout=READY_TIMEOUT_S, scheme="http", ssl_context=None):
        """Polls GET /v2/health/ready until 200; raises with the log tail if the process dies."""
        url = f"{scheme}://127.0.0.1:{self.http_port}/v2/health/ready"
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                raise RuntimeError(f"sampan serve exited with {rc} before ready; log tail:\n"
                                   + self.log_tail(20))
            try:
                with urllib.request.urlopen(url, timeout=5, context=ssl_context) as r:
                    if r.status == 200:
                        return self
                    last = f"status {r.status}"
            except urllib.error.HTTPError as e:
                last = f"status {e.code}"
            except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
                last = str(e)
            time.sleep(0.1)
        raise RuntimeError(f"sampan serve not ready after {timeout} s ({last}); log tail:\n"
                           + self.log_tail(20))

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Sends `sig`, waits up to `timeout` s (then kills); returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.proc.returncode

    def log_tail(self, n=20):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode(errors="replace").rstrip("\n").split("\n")
            return "\n".join(lines[-n:])
        except OSError as e:
            return f"(no log: {e})"

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def __enter__(self):
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop(signal.SIGKILL, timeout=10)
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def _decode_body(raw):
    text = raw.decode(errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def http_json(method, url, body=None, headers=None, timeout=60, ssl_context=None):
    """-> (status, parsed JSON or text, headers dict with lower-cased names).

    `body` may be a dict/list (sent as JSON), str or bytes (sent as is) or None.
    """
    hdrs = dict(headers or {})
    data = None
    if body is not None:
        if isinstance(body, (dict, list)):
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = bytes(body)
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ssl_context) as r:
            raw = r.read()
            h = {k.lower(): v for k, v in r.headers.items()}
            return r.status, _decode_body(raw), h
    except urllib.error.HTTPError as e:
        raw = e.read()
        h = {k.lower(): v for k, v in e.headers.items()} if e.headers else {}
        return e.code, _decode_body(raw), h


def sse_events(url, body, headers=None, timeout=300, ssl_context=None, on_event=None):
    """POSTs `body` as JSON and reads the Server-Sent Events stream to its end.

    -> list of parsed `data:` payloads (JSON objects; the final "[DONE]" kept as a str).
    Raises RuntimeError on a non-200 status (message carries the body). `on_event(payload)`,
    if given, is called as each event arrives (for timing).
    """
    u = urllib.parse.urlsplit(url)
    if u.scheme == "https":
        conn = http.client.HTTPSConnection(u.hostname, u.port, timeout=timeout,
                                           context=ssl_context)
    else:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    hdrs = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    hdrs.update(headers or {})
    path = u.path + (("?" + u.query) if u.query else "")
    try:
        conn.request("POST", path, body=json.dumps(body).encode(), headers=hdrs)
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read().decode(errors='replace')}")
        events = []
        data_lines = []
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.decode().rstrip("\r\n")
            if line == "":
                if data_lines:
                    payload = "\n".join(data_lines)
                    data_lines = []
                    ev = payload if payload == "[DONE]" else json.loads(payload)
                    events.append(ev)
                    if on_event is not None:
                        on_event(ev)
                continue
            if line.startswith(":"):
                continue  # SSE comment (keep-alive)
            if line.startswith("data:"):
                data_lines.append(line[5:].lstrip(" "))
        if data_lines:
            payload = "\n".join(data_lines)
            events.append(payload if payload == "[DONE]" else json.loads(payload))
        return events
    finally:
        conn.close()


def sse_text(events):
    """Concatenated text of completion or chat-completion stream chunks."""
    out = []
    for ev in events:
        if not isinstance(ev, dict):
            continue
        for ch in ev.get("choices") or []:
            if "text" in ch and ch["text"]:
                out.append(ch["text"])
            delta = ch.get("delta") or {}
            if delta.get("content"):
                out.append(delta["content"])
    return "".join(out)


def metrics(url, timeout=30, headers=None, ssl_context=None):
    """Scrapes `url` (.../metrics or the server base URL) and parses it with prometheus_client.

    -> {(sample name, frozenset(labels.items())): value}. Raises on a parse error.
    Histogram samples appear under their _bucket/_sum/_count names, counters under the name
    prometheus_client gives them (it strips and re-adds `_total`).
    """
    from prometheus_client.parser import text_string_to_metric_families
    if not url.rstrip("/").endswith("/metrics"):
        url = url.rstrip("/") + "/metrics"
    req = urllib.request.Request(url, headers=dict(headers or {}))
    with urllib.request.urlopen(req, timeout=timeout, context=ssl_context) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def metric_families(url, timeout=30):
    """-> {family name: family type} as prometheus_client parses them."""
    from prometheus_client.parser import text_string_to_metric_families
    if not url.rstrip("/").endswith("/metrics"):
        url = url.rstrip("/") + "/metrics"
    with urllib.request.urlopen(url, timeout=timeout) as r:
        text = r.read().decode()
    return {f.name: f.type for f in text_string_to_metric_families(text)}


def metric_value(m, name, **labels):
    """Sum of the samples named `name` whose labels include `labels` (0 when none)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in m.items() if n == name and want <= set(ls))


# ---- asyncio HTTP/1.1 client: hundreds of concurrent connections without a thread each ----

async def async_open(host, port, ssl_context=None):
    import asyncio
    return await asyncio.open_connection(host, port, ssl=ssl_context, limit=1 << 20)


async def async_sse_request(reader, writer, host, path, body, headers=None, on_event=None):
    """Sends one POST with a JSON body on an open connection and reads the whole response.

    -> (status, events or body text). `events` are the parsed SSE `data:` payloads ("[DONE]"
    kept); chunked and Content-Length bodies are both handled. The connection is closed after.
    `on_event(payload)` is called as each event arrives.
    """
    data = json.dumps(body).encode()
    hdrs = {"Host": host, "Content-Type": "application/json", "Accept": "text/event-stream",
            "Content-Length": str(len(data)), "Connection": "close"}
    hdrs.update(headers or {})
    head = f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
    writer.write(head.encode() + b"\r\n" + data)
    await writer.drain()
    try:
        status_line = await reader.readline()
        if not status_line:
            raise ConnectionError("connection closed before the status line")
        status = int(status_line.split()[1])
        resp_headers = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            k, _, v = line.decode().partition(":")
            resp_headers[k.strip().lower()] = v.strip()
        parser = _SseParser(on_event)
        if resp_headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size_line = await reader.readline()
                if not size_line:
                    break
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    await reader.readline()  # the empty line after the last chunk
                    break
                chunk = await reader.readexactly(size + 2)
                parser.feed(chunk[:-2])
        elif "content-length" in resp_headers:
            parser.feed(await reader.readexactly(int(resp_headers["content-length"])))
        else:
            parser.feed(await reader.read())
        if status != 200 or not resp_headers.get("content-type", "").startswith(
                "text/event-stream"):
            return status, parser.raw.decode(errors="replace")
        parser.flush()
        return status, parser.events
    finally:
        writer.close()


class _SseParser:
    def __init__(self, on_event=None):
        self.raw = b""
        self._pending = b""
        self._data = []
        self.events = []
        self._on_event = on_event

    def feed(self, b):
        self.raw += b
        self._pending += b
        while b"\n" in self._pending:
            line, _, self._pending = self._pending.partition(b"\n")
            self._line(line.decode(errors="replace").rstrip("\r"))

    def _line(self, line):
        if line == "":
            self._emit()
        elif line.startswith("data:"):
            self._data.append(line[5:].lstrip(" "))

    def _emit(self):
        if not self._data:
            return
        payload = "\n".join(self._data)
        self._data = []
        try:
            ev = payload if payload == "[DONE]" else json.loads(payload)
        except ValueError:
            ev = payload
        self.events.append(ev)
        if self._on_event is not None:
            self._on_event(ev)

    def flush(self):
        if self._pending:
            self._line(self._pending.decode(errors="replace").rstrip("\r"))
            self._pending = b""
        self._emit()


def proto_message_classes(args, protos, names, tag):
    """-> {full message name: class} for `names`, from the .proto files `protos` (paths under
    the repository), compiled at run time to a descriptor set (no generated stubs needed).
    Raises RuntimeError when neither grpc_tools nor protoc can compile them."""
    import shutil
    from google.protobuf import descriptor_pb2, descriptor_pool
    out = os.path.join(args.work_dir, f"{tag}.desc")
    argv = ["--proto_path=" + args.source_dir, "--include_imports",
            "--descriptor_set_out=" + out] + list(protos)
    try:
        from grpc_tools import protoc
        rc = protoc.main(["protoc"] + argv)
    except ImportError:
        exe = shutil.which("protoc")
        if exe is None:
            raise RuntimeError("neither grpc_tools nor protoc is available")
        rc = subprocess.run([exe] + argv, cwd=args.source_dir).returncode
    if rc != 0:
        raise RuntimeError(f"protoc failed on {' '.join(protos)} (exit {rc})")
    with open(out, "rb") as f:
        fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)
    try:
        from google.protobuf.message_factory import GetMessageClass
    except ImportError:  # protobuf < 4.21
        from google.protobuf import message_factory
        GetMessageClass = message_factory.MessageFactory(pool).GetPrototype  # noqa: N806
    return {n: GetMessageClass(pool.FindMessageTypeByName(n)) for n in names}
