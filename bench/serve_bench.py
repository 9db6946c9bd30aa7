#!/usr/bin/env python3
"""Closed-loop serving benchmark against a running `sampan serve` (standard library only).

    python3 bench/serve_bench.py --url http://127.0.0.1:8000 [--concurrency "1 4 16 64"]
        [--prompt-len 128] [--output-len 64] [--requests N] [--json OUT.json]

At each concurrency C, C clients each send streaming /v1/completions requests back to back
(closed loop: a client sends its next request when the previous one ends) until the level's
request count is done. Every request has a fixed prompt of --prompt-len token ids (distinct per
request, so the prefix cache does not shortcut prefill) and generates exactly --output-len tokens
(ignore_eos, greedy). Reported per level:
  output tok/s   completion tokens of all requests / wall time from first send to last end
  TTFT p50/p99   send -> first generated token's event
  ITL p50/p99    gap between consecutive token events of one stream (logprobs are requested so
                 every event's token count is known; a gap spanning k tokens counts as k gaps of
                 gap / k)
  TPOT           per request (last token - first token) / (tokens - 1), mean
  srvITL p50/p99 the server's own inter-token histogram (/metrics) over the level: engine-side
                 gaps, free of this client's and the socket's burstiness
One JSON line per level on stdout as it finishes, then a table; --json writes all levels.
"""

import argparse
import asyncio
import json
import statistics
import sys
import time
import urllib.parse
import urllib.request


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def scrape_histograms(url, names):
    """-> {name: [(upper bound, cumulative count)]} from the server's /metrics (no labels)."""
    out = {n: [] for n in names}
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
            text = r.read().decode()
    except OSError:
        return out
    for line in text.splitlines():
        for n in names:
            prefix = n + '_bucket{le="'
            if line.startswith(prefix):
                le, _, value = line[len(prefix):].partition('"} ')
                out[n].append((float(le), float(value)))
    return out


def histogram_quantile(before, after, q):
    """Quantile q (0..1) of the observations between two scrapes, interpolated linearly in the
    bucket it falls in (Prometheus' histogram_quantile). nan when there were none."""
    b = dict(before)
    counts = [(le, c - b.get(le, 0.0)) for le, c in sorted(after)]
    if not counts or counts[-1][1] <= 0:
        return float("nan")
    rank = q * counts[-1][1]
    prev_le, prev_c = 0.0, 0.0
    for le, c in counts:
        if c >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_c) / max(c - prev_c, 1e-12)
        prev_le, prev_c = le, c
    return prev_le


SERVER_HISTOGRAMS = ("sampan:inter_token_latency_seconds", "sampan:time_to_first_token_seconds")


def prompt_ids(n, salt, vocab):
    # Ordinary vocabulary ids (past <unk>, <s>, </s> and the 256 byte tokens of a Llama SPM
    # vocabulary); `salt` makes each request's prompt distinct from its first token on.
    base = 259
    span = vocab - base
    return [base + ((salt + 1) * 104729 + i * 7919) % span for i in range(n)]


async def one_request(host, port, path, body, headers):
    """-> (t_send, [(t_event, n_tokens)], usage) for one streaming completion."""
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 22)
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n")
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    t_send = time.perf_counter()
    writer.write(head.encode() + b"\r\n" + data)
    await writer.drain()
    events, usage = [], None
    try:
        status = int((await reader.readline()).split()[1])
        chunked = False
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.decode().partition(":")
            if k.strip().lower() == "transfer-encoding" and "chunked" in v.lower():
                chunked = True
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {(await reader.read()).decode(errors='replace')}")
        pending = b""
        while True:
            if chunked:
                size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    break
                chunk = (await reader.readexactly(size + 2))[:-2]
            else:
                chunk = await reader.read(65536)
                if not chunk:
                    break
            now = time.perf_counter()
            pending += chunk
            while b"\n\n" in pending:
                ev, _, pending = pending.partition(b"\n\n")
                for line in ev.split(b"\n"):
                    if not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        continue
                    obj = json.loads(payload)
                    if obj.get("usage"):
                        usage = obj["usage"]
                    for ch in obj.get("choices") or []:
                        lp = ch.get("logprobs") or {}
                        n = len(lp.get("tokens") or []) if lp else 0
                        if n == 0 and ch.get("text"):
                            n = 1
                        if n:
                            events.append((now, n))
    finally:
        writer.close()
    return t_send, events, usage


async def run_level(args, host, port, model, conc, n_requests, salt0):
    path = "/v1/completions"
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    queue = list(range(n_requests))
    results = []

    async def client():
        while queue:
            i = queue.pop()
            body = {"model": model, "prompt": prompt_ids(args.prompt_len, salt0 + i, args.vocab),
                    "max_tokens": args.output_len, "temperature": 0, "ignore_eos": True,
                    "stream": True, "stream_options": {"include_usage": True}, "logprobs": 0}
            results.append(await one_request(host, port, path, body, headers))

    h0 = scrape_histograms(args.url, SERVER_HISTOGRAMS)
    t0 = time.perf_counter()
    await asyncio.gather(*[client() for _ in range(conc)])
    wall = time.perf_counter() - t0
    h1 = scrape_histograms(args.url, SERVER_HISTOGRAMS)
    itl_name, ttft_name = SERVER_HISTOGRAMS
    ttft, itl, tpot, out_tokens = [], [], [], 0
    for t_send, events, usage in results:
        n = usage["completion_tokens"] if usage else sum(k for _, k in events)
        out_tokens += n
        if not events:
            continue
        ttft.append(events[0][0] - t_send)
        for (ta, _), (tb, k) in zip(events, events[1:]):
            itl.extend([(tb - ta) / k] * k)
        if n > 1:
            tpot.append((events[-1][0] - events[0][0]) / (n - 1))
    return {
        "concurrency": conc, "requests": len(results), "prompt_len": args.prompt_len,
        "output_len": args.output_len, "wall_s": wall, "output_tokens": out_tokens,
        "output_tok_s": out_tokens / wall,
        "ttft_p50_ms": 1e3 * percentile(ttft, 50), "ttft_p99_ms": 1e3 * percentile(ttft, 99),
        "itl_p50_ms": 1e3 * percentile(itl, 50), "itl_p99_ms": 1e3 * percentile(itl, 99),
        "tpot_mean_ms": 1e3 * statistics.fmean(tpot) if tpot else float("nan"),
        "server_itl_p50_ms": 1e3 * histogram_quantile(h0[itl_name], h1[itl_name], 0.50),
        "server_itl_p99_ms": 1e3 * histogram_quantile(h0[itl_name], h1[itl_name], 0.99),
        "server_ttft_p50_ms": 1e3 * histogram_quantile(h0[ttft_name], h1[ttft_name], 0.50),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default="", help="served model name (default: from /v1/models)")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--concurrency", default="1 4 16 64")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--requests", type=int, default=0,
                    help="requests per level (default: max(4, 2 x concurrency))")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--json", default="", help="write all levels to this file")
    args = ap.parse_args()
    u = urllib.parse.urlsplit(args.url)
    host, port = u.hostname, u.port or 80
    model = args.model
    if not model:
        req = urllib.request.Request(args.url + "/v1/models", headers=(
            {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}))
        with urllib.request.urlopen(req, timeout=30) as r:
            model = json.load(r)["data"][0]["id"]
    levels = [int(c) for c in args.concurrency.split()]
    # Warm-up: page the weights in and let the first-call paths run outside the timing.
    asyncio.run(run_level(args, host, port, model, 1, 1, 10**6))
    rows = []
    salt = 0
    for c in levels:
        n = args.requests or max(4, 2 * c)
        row = asyncio.run(run_level(args, host, port, model, c, n, salt))
        salt += n
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    print(f"served: prompt {args.prompt_len} tokens, output {args.output_len} tokens, "
          f"model {model}")
    print("%11s %8s %12s %10s %10s %9s %9s %9s %11s %11s" % (
        "concurrency", "requests", "output_tok/s", "TTFT_p50", "TTFT_p99", "ITL_p50", "ITL_p99",
        "TPOT", "srvITL_p50", "srvITL_p99"))
    for r in rows:
        print("%11d %8d %12.2f %8.1fms %8.1fms %7.1fms %7.1fms %7.1fms %9.1fms %9.1fms" % (
            r["concurrency"], r["requests"], r["output_tok_s"], r["ttft_p50_ms"],
            r["ttft_p99_ms"], r["itl_p50_ms"], r["itl_p99_ms"], r["tpot_mean_ms"],
            r["server_itl_p50_ms"], r["server_itl_p99_ms"]))
    print("ITL: gaps between token events as this client received them; srvITL: the server's "
          "sampan:inter_token_latency_seconds histogram over the level, bucket-interpolated")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": model, "levels": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
