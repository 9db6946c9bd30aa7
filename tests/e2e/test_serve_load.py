"""End-to-end: `sampan serve` under concurrent load, as real clients see it.

- 64 concurrent greedy streaming completions each give exactly the text the same request gives
  when it runs alone (continuous batching and the paged KV cache change nothing in the result);
- engine steps really batch (sampan:batch_size has steps with more than one sequence);
- /metrics parses with prometheus_client, has every family of server/serve_metrics.h, and its
  counters agree with the usage the responses reported;
- a repeated long system prompt hits the prefix cache (metrics and usage.cached_tokens), and the
  cached answer equals the one of a server without prefix cache;
- 1,000 concurrent streaming connections all complete, each with the text it gives alone.
"""

import asyncio
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402
import serve_util as su  # noqa: E402

N_STREAMS = 64
MAX_TOKENS = 24
N_CONNECTIONS = 1000
MAX_TOKENS_SMALL = 4

# Every family server/serve_metrics.h promises, with its type. prometheus_client names a counter
# family without its `_total` suffix.
FAMILIES = {
    "sampan:requests": "counter",
    "sampan:request_finished": "counter",
    "sampan:prompt_tokens": "counter",
    "sampan:generation_tokens": "counter",
    "sampan:time_to_first_token_seconds": "histogram",
    "sampan:inter_token_latency_seconds": "histogram",
    "sampan:e2e_request_latency_seconds": "histogram",
    "sampan:request_queue_time_seconds": "histogram",
    "sampan:num_requests_running": "gauge",
    "sampan:num_requests_waiting": "gauge",
    "sampan:kv_cache_usage_ratio": "gauge",
    "sampan:kv_cache_blocks_used": "gauge",
    "sampan:kv_cache_blocks_total": "gauge",
    "sampan:kv_cache_bytes": "gauge",
    "sampan:prefix_cache_queries": "counter",
    "sampan:prefix_cache_hits": "counter",
    "sampan:num_preemptions": "counter",
    "sampan:cuda_graph_replays": "counter",
    "sampan:batch_size": "histogram",
    "sampan:batch_tokens": "histogram",
    "sampan:server_ready": "gauge",
}

ADJ = ["quiet", "red", "old", "brave", "tiny", "golden", "sleepy", "clever"]
NOUN = ["fox", "king", "river", "robot", "garden", "sailor", "mountain", "teacher"]


def prompts():
    # 64 distinct prompts of different lengths, so prefill chunks and decodes mix in one step.
    out = []
    for i in range(N_STREAMS):
        extra = " and then" * (i % 5)
        out.append(f"Once upon a time the {ADJ[i % 8]} {NOUN[i // 8]}{extra} went")
    return out


def completion_body(model, prompt, max_tokens, stream):
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def run_alone(srv, model, ps, max_tokens):
    """-> list of (text, usage) of each prompt run one at a time, non-streaming."""
    out = []
    for p in ps:
        st, body, _ = su.http_json("POST", srv.http_url + "/v1/completions",
                                   completion_body(model, p, max_tokens, False))
        if st != 200:
            raise RuntimeError(f"alone run of {p!r}: HTTP {st}: {body}")
        out.append((body["choices"][0]["text"], body["usage"]))
    return out


def stream_usage(events):
    for ev in reversed(events):
        if isinstance(ev, dict) and ev.get("usage"):
            return ev["usage"]
    return None


def stream_finish(events):
    for ev in events:
        if isinstance(ev, dict):
            for ch in ev.get("choices") or []:
                if ch.get("finish_reason"):
                    return ch["finish_reason"]
    return None


def hist_count_above(m, name, threshold):
    """Observations of histogram `name` greater than `threshold` (a bucket bound)."""
    count = su.metric_value(m, name + "_count")
    at = [v for (n, ls), v in m.items()
          if n == name + "_bucket" and float(dict(ls)["le"]) == threshold]
    return count - (at[0] if at else 0)


def settled_metrics(url, base, n_finished, timeout=10):
    """Scrapes until request_finished_total has grown by `n_finished` over `base`: a response
    may reach the client just before the server counts it, so one scrape can lag by a request.
    """
    def grown(m):
        return (su.metric_value(m, "sampan:request_finished_total")
                - su.metric_value(base, "sampan:request_finished_total")) >= n_finished
    deadline = time.monotonic() + timeout
    m = su.metrics(url)
    while not grown(m) and time.monotonic() < deadline:
        time.sleep(0.05)
        m = su.metrics(url)
    return m


def check_kv_bytes(res, url, model_dir):
    """sampan:kv_cache_bytes is what the pools hold: blocks x 16 tokens (the default block size)
    x K and V x layers x kv_dim f32 values (the default f32 cache), from config.json."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_dim = cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * head_dim
    m = su.metrics(url)
    blocks = su.metric_value(m, "sampan:kv_cache_blocks_total")
    want = blocks * 16 * 2 * cfg["num_hidden_layers"] * kv_dim * 4
    got = su.metric_value(m, "sampan:kv_cache_bytes")
    res.check("metrics: kv_cache_bytes = blocks x block size x 2 x layers x kv_dim x 4",
              blocks > 0 and got == want, f"got {got}, want {want} ({blocks} blocks)")


def check_metrics_shape(res, url):
    fams = su.metric_families(url)
    missing = [f for f in FAMILIES if f not in fams]
    wrong = [f"{f}: {fams[f]} (want {t})" for f, t in FAMILIES.items()
             if f in fams and fams[f] != t]
    res.check("metrics: every family of serve_metrics.h, parsed by prometheus_client",
              not missing and not wrong, f"missing {missing}, wrong type {wrong}")
    # Histograms: cumulative buckets never decrease, +Inf equals _count.
    m = su.metrics(url)
    bad = []
    for f, t in FAMILIES.items():
        if t != "histogram":
            continue
        buckets = sorted((float(dict(ls)["le"]), v) for (n, ls), v in m.items()
                         if n == f + "_bucket")
        vals = [v for _, v in buckets]
        if not buckets or buckets[-1][0] != float("inf") or vals != sorted(vals) \
                or vals[-1] != su.metric_value(m, f + "_count"):
            bad.append(f)
    res.check("metrics: histogram buckets cumulative, +Inf == _count", not bad, f"bad: {bad}")


def concurrent_streams(srv, model, ps, max_tokens):
    """All prompts streamed at once from threads released together -> [(events or exc)]."""
    results = [None] * len(ps)
    barrier = threading.Barrier(len(ps))

    def worker(i):
        try:
            barrier.wait(timeout=60)
            results[i] = su.sse_events(srv.http_url + "/v1/completions",
                                       completion_body(model, ps[i], max_tokens, True))
        except Exception as e:  # reported per stream below
            results[i] = e

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(ps))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    return results


def check_64_streams(res, srv, model):
    ps = prompts()
    m0 = su.metrics(srv.http_url)
    alone = run_alone(srv, model, ps, MAX_TOKENS)
    m1 = settled_metrics(srv.http_url, m0, len(ps))

    d = lambda name, **kw: su.metric_value(m1, name, **kw) - su.metric_value(m0, name, **kw)
    gen = sum(u["completion_tokens"] for _, u in alone)
    prompt = sum(u["prompt_tokens"] for _, u in alone)
    res.check("alone runs: every request gave max_tokens tokens",
              all(u["completion_tokens"] == MAX_TOKENS for _, u in alone),
              f"{[u['completion_tokens'] for _, u in alone][:8]}...")
    res.check("counters: generation_tokens_total == sum of usage.completion_tokens",
              d("sampan:generation_tokens_total") == gen,
              f"delta {d('sampan:generation_tokens_total')}, usage {gen}")
    res.check("counters: prompt_tokens_total == sum of usage.prompt_tokens",
              d("sampan:prompt_tokens_total") == prompt,
              f"delta {d('sampan:prompt_tokens_total')}, usage {prompt}")
    res.check("counters: request_finished_total{finish_reason=length} counts every request",
              d("sampan:request_finished_total", finish_reason="length") == len(ps),
              f"delta {d('sampan:request_finished_total', finish_reason='length')}")
    res.check("counters: requests_total{api=openai,code=200} counts every request",
              d("sampan:requests_total", api="openai", code="200") == len(ps),
              f"delta {d('sampan:requests_total', api='openai', code='200')}")

    t0 = time.monotonic()
    streams = concurrent_streams(srv, model, ps, MAX_TOKENS)
    wall = time.monotonic() - t0
    m2 = settled_metrics(srv.http_url, m1, len(ps))
    errors = [f"#{i}: {r}" for i, r in enumerate(streams) if isinstance(r, Exception)]
    res.check(f"{N_STREAMS} concurrent streams: all complete with [DONE]",
              not errors and all(r and r[-1] == "[DONE]" for r in streams),
              f"{len(errors)} failed, first: {errors[:1]}; {wall:.2f} s")
    if errors:
        return
    mismatch = [i for i, r in enumerate(streams) if su.sse_text(r) != alone[i][0]]
    detail = f"{len(mismatch)} differ"
    if mismatch:
        i = mismatch[0]
        detail += f"; #{i}: stream {su.sse_text(streams[i])!r} vs alone {alone[i][0]!r}"
    res.check(f"{N_STREAMS} concurrent streams: each text == its text run alone (greedy)",
              not mismatch, detail)
    res.check("streams: finish_reason length on every stream",
              all(stream_finish(r) == "length" for r in streams),
              f"{[stream_finish(r) for r in streams][:4]}...")
    usages = [stream_usage(r) for r in streams]
    res.check("streams: include_usage gives usage equal to the alone run",
              all(u and u["completion_tokens"] == MAX_TOKENS
                  and u["prompt_tokens"] == alone[i][1]["prompt_tokens"]
                  for i, u in enumerate(usages)),
              f"first {usages[0]}")

    d2 = lambda name, **kw: su.metric_value(m2, name, **kw) - su.metric_value(m1, name, **kw)
    res.check("counters after streams: generation tokens == sum of stream usage",
              d2("sampan:generation_tokens_total") == N_STREAMS * MAX_TOKENS,
              f"delta {d2('sampan:generation_tokens_total')}")
    res.check("counters after streams: request_finished_total{length} grew by 64",
              d2("sampan:request_finished_total", finish_reason="length") == N_STREAMS)
    multi = hist_count_above(m2, "sampan:batch_size", 1) - hist_count_above(m1,
                                                                          "sampan:batch_size", 1)
    steps = d2("sampan:batch_size_count")
    res.check("batch_size histogram: steps with > 1 sequence during the concurrent run",
              multi > 0, f"{multi} of {steps} steps batched > 1 sequence")
    # 64 x 24 decode tokens in far fewer steps than 64 x 24 shows the decodes were batched.
    res.check("batching: fewer engine steps than tokens generated",
              0 < steps < N_STREAMS * MAX_TOKENS / 2, f"{steps} steps")
    res.check("TTFT histogram counted every stream",
              d2("sampan:time_to_first_token_seconds_count") == N_STREAMS,
              f"delta {d2('sampan:time_to_first_token_seconds_count')}")
    res.check("running/waiting gauges back to 0 when idle",
              su.metric_value(m2, "sampan:num_requests_running") == 0
              and su.metric_value(m2, "sampan:num_requests_waiting") == 0)


LONG_SYSTEM = " ".join(
    f"Rule {i}: the assistant answers politely and mentions the {ADJ[i % 8]} {NOUN[i % 8]}."
    for i in range(24))


def chat_body(model, question):
    return {"model": model, "temperature": 0, "max_tokens": 16, "ignore_eos": True,
            "messages": [{"role": "system", "content": LONG_SYSTEM},
                         {"role": "user", "content": question}]}


def check_prefix_cache(res, srv, model, args):
    m0 = su.metrics(srv.http_url)
    st1, b1, _ = su.http_json("POST", srv.http_url + "/v1/chat/completions",
                              chat_body(model, "Where is the river?"))
    st2, b2, _ = su.http_json("POST", srv.http_url + "/v1/chat/completions",
                              chat_body(model, "Who is the king?"))
    m1 = su.metrics(srv.http_url)
    if not res.check("prefix cache: two chat requests with one long system prompt",
                     st1 == 200 and st2 == 200, f"{st1} {b1 if st1 != 200 else ''} "
                                                f"{st2} {b2 if st2 != 200 else ''}"):
        return
    hits = su.metric_value(m1, "sampan:prefix_cache_hits_total") - su.metric_value(
        m0, "sampan:prefix_cache_hits_total")
    queries = su.metric_value(m1, "sampan:prefix_cache_queries_total") - su.metric_value(
        m0, "sampan:prefix_cache_queries_total")
    prompt_tokens = b2["usage"]["prompt_tokens"]
    cached = ((b2["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    res.check("prefix cache: prefix_cache_hits_total grows on the repeated system prompt",
              hits > 0 and queries >= prompt_tokens, f"hits +{hits}, queries +{queries}, "
                                                     f"prompt {prompt_tokens}")
    res.check("prefix cache: usage.prompt_tokens_details.cached_tokens > 0",
              0 < cached < prompt_tokens, f"cached {cached} of {prompt_tokens}")
    # The text served from cached K/V must equal a server computing everything afresh.
    with su.Server(args, srv.model_dir, ["--no-prefix-cache"]) as ref:
        st3, b3, _ = su.http_json("POST", ref.http_url + "/v1/chat/completions",
                                  chat_body(model, "Who is the king?"))
    ok = st3 == 200 and b3["choices"][0]["message"]["content"] == \
        b2["choices"][0]["message"]["content"]
    res.check("prefix cache: cached answer == answer of a server with --no-prefix-cache", ok,
              f"cached {b2['choices'][0]['message']['content']!r} vs "
              f"{b3['choices'][0]['message']['content'] if st3 == 200 else b3!r}")


async def thousand_streams(srv, model, ps):
    host, port = "127.0.0.1", srv.http_port
    # Every connection is open before any request is sent, so all 1000 are concurrent.
    conns = await asyncio.gather(*[su.async_open(host, port) for _ in range(N_CONNECTIONS)],
                                 return_exceptions=True)
    opened = sum(1 for c in conns if not isinstance(c, Exception))
    peak = {"inflight": 0}
    done = asyncio.Event()

    async def poll():
        loop = asyncio.get_running_loop()
        while not done.is_set():
            try:
                m = await loop.run_in_executor(None, su.metrics, srv.http_url)
                peak["inflight"] = max(peak["inflight"],
                                       su.metric_value(m, "sampan:num_requests_running")
                                       + su.metric_value(m, "sampan:num_requests_waiting"))
            except Exception:
                pass
            await asyncio.sleep(0.2)

    async def one(i, conn):
        if isinstance(conn, Exception):
            return conn
        reader, writer = conn
        try:
            return await asyncio.wait_for(
                su.async_sse_request(reader, writer, f"{host}:{port}", "/v1/completions",
                                     completion_body(model, ps[i % len(ps)], MAX_TOKENS_SMALL,
                                                     True)), timeout=600)
        except Exception as e:
            return e

    poller = asyncio.create_task(poll())
    out = await asyncio.gather(*[one(i, c) for i, c in enumerate(conns)])
    done.set()
    await poller
    return opened, out, peak["inflight"]


def check_thousand(res, srv, model):
    ps = prompts()
    alone = run_alone(srv, model, ps, MAX_TOKENS_SMALL)
    t0 = time.monotonic()
    opened, out, peak = asyncio.run(thousand_streams(srv, model, ps))
    wall = time.monotonic() - t0
    failed = [(i, r) for i, r in enumerate(out)
              if isinstance(r, Exception) or r[0] != 200 or not r[1] or r[1][-1] != "[DONE]"]
    res.check(f"{N_CONNECTIONS} concurrent streaming connections all complete",
              opened == N_CONNECTIONS and not failed,
              f"{opened} opened, {len(failed)} failed (first {failed[:1]}), {wall:.1f} s, "
              f"peak running+waiting {peak}")
    if failed:
        return
    mismatch = [i for i, r in enumerate(out) if su.sse_text(r[1]) != alone[i % len(ps)][0]]
    res.check(f"{N_CONNECTIONS} streams: each text == its prompt's text run alone",
              not mismatch, f"{len(mismatch)} differ" + (
                  f"; #{mismatch[0]}: {su.sse_text(out[mismatch[0]][1])!r} vs "
                  f"{alone[mismatch[0] % len(ps)][0]!r}" if mismatch else ""))
    st, _, _ = su.http_json("GET", srv.http_url + "/v2/health/ready")
    res.check("server ready after the 1000 connections", st == 200, f"status {st}")


def main():
    args = eu.parse_args(__doc__.split("\n")[0])
    res = eu.Results()
    eu.require_binary(args, res)
    model_dir = su.make_serve_model(args)
    extra = ["--max-running", str(N_STREAMS), "--max-waiting", str(N_CONNECTIONS),
             "--max-connections", "4096"]
    srv = su.Server(args, model_dir, extra, env={"SAMPAN_LOG_LEVEL": "warn"})
    try:
        srv.start()
        srv.wait_ready()
    except Exception as e:
        res.check("sampan serve starts and becomes ready", False, str(e))
        srv.stop()
        res.finish()
    try:
        st, body, _ = su.http_json("GET", srv.http_url + "/v1/models")
        model = body["data"][0]["id"] if st == 200 else "serve-model"
        res.check("GET /v1/models names the served model", st == 200 and model == "serve-model",
                  f"{st} {body}")
        check_metrics_shape(res, srv.http_url)
        check_kv_bytes(res, srv.http_url, model_dir)
        check_64_streams(res, srv, model)
        check_prefix_cache(res, srv, model, args)
        check_thousand(res, srv, model)
        check_metrics_shape(res, srv.http_url)
    except Exception as e:
        res.check("no unexpected exception", False, f"{type(e).__name__}: {e}\nserver log:\n"
                  + srv.log_tail(15))
    finally:
        rc = srv.stop()
        res.check("server exits 0 on SIGTERM", rc == 0, f"exit {rc}; log:\n{srv.log_tail(5)}"
                  if rc != 0 else "")
    res.finish()


if __name__ == "__main__":
    main()
