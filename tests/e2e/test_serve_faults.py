"""End-to-end: faults inside the engine never take `sampan serve` down.

1. Fault injection (the engine's test hook, SAMPAN_TEST_FAULT_EVERY_N_STEPS): every 5th forward
   throws as a failing kernel would. Concurrent streaming and non-streaming requests each end
   with exactly one outcome: their normal answer, or (when a failing step held them) an HTTP 500
   / an SSE error event naming the failure, then [DONE]. None hangs, the KV cache is empty
   afterwards, and the server goes on serving.
2. KV exhaustion: a cache that holds one sequence and 12 concurrent long requests: the engine
   preempts (counted in /metrics), every request completes with 200, nothing crashes.
"""

import os
import sys
import time
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402
import serve_util as su  # noqa: E402

MODEL = "serve-model"


def choices_of(i):
    # Requests 1, 5, 9, ... ask for 3 choices: one failing choice must end the whole request
    # with one clean error (the others cancelled), never two answers or a hang.
    return 3 if i % 4 == 1 else 1


def completion(i, stream):
    # Every third request wants one token: it ends in the first forward, before any injected
    # failure; the others run through the failing ones.
    return {"model": MODEL, "prompt": f"Request {i}: once upon a time",
            "max_tokens": 1 if i % 3 == 0 else 24, "temperature": 0, "ignore_eos": True,
            "stream": stream, "n": choices_of(i)}


def run_concurrently(srv, n):
    """n requests at once, alternating streaming and not. -> list of (kind, outcome, detail):
    outcome "ok", "error" (a clean failure naming the injected fault) or "bad"."""
    results = [None] * n

    def one(i):
        stream = i % 2 == 0
        body = completion(i, stream)
        try:
            if stream:
                ev = su.sse_events(srv.http_url + "/v1/completions", body, timeout=300)
                errs = [e for e in ev if isinstance(e, dict) and "error" in e]
                done = bool(ev) and ev[-1] == "[DONE]"
                if errs and done and "injected fault" in errs[0]["error"]["message"]:
                    results[i] = ("stream", "error", errs[0]["error"]["message"])
                elif not errs and done and sorted(
                        c["index"] for e in ev if isinstance(e, dict)
                        for c in e.get("choices", [])
                        if c.get("finish_reason") == "length") == list(range(choices_of(i))):
                    results[i] = ("stream", "ok", su.sse_text(ev))
                else:
                    results[i] = ("stream", "bad", str(ev[-3:]))
            else:
                st, b, _ = su.http_json("POST", srv.http_url + "/v1/completions", body,
                                        timeout=300)
                if st == 200 and len(b["choices"]) == choices_of(i) and all(
                        c["finish_reason"] == "length" for c in b["choices"]):
                    results[i] = ("whole", "ok", b["choices"][0]["text"])
                elif st == 500 and "injected fault" in b["error"]["message"]:
                    results[i] = ("whole", "error", b["error"]["message"])
                else:
                    results[i] = ("whole", "bad", f"{st} {str(b)[:200]}")
        except Exception as e:  # reported as a bad outcome
            results[i] = ("?", "bad", f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    return [r if r is not None else ("?", "bad", "no answer (hung)") for r in results]


def started(res, srv, what):
    """Starts `srv`; False (with a failed check) when it does not get ready."""
    try:
        srv.start().wait_ready(timeout=600)
        return True
    except RuntimeError as e:
        res.check(f"{what}: sampan serve starts", False, str(e))
        srv.stop()
        return False


def kv_blocks_used(srv, timeout=10):
    """sampan:kv_cache_blocks_used once it reaches 0, or its last value after `timeout` s.

    A client can read its last byte before the engine thread has published the blocks its
    request freed (the response is written first), so a scrape right after the last response
    may still count them for a moment: wait for 0 instead of sampling once (as test_serve_grpc
    does). Blocks that are really leaked never reach 0 and fail the check.
    """
    deadline = time.monotonic() + timeout
    while True:
        used = su.metric_value(su.metrics(srv.http_url), "sampan:kv_cache_blocks_used")
        if used == 0 or time.monotonic() > deadline:
            return used
        time.sleep(0.05)


def check_fault_injection(res, args, model_dir):
    srv = su.Server(args, model_dir, ["--max-model-len", "128", "--block-size", "16",
                                      "--num-kv-blocks", "24"],
                    env={"SAMPAN_TEST_FAULT_EVERY_N_STEPS": "5"})
    if not started(res, srv, "fault injection"):
        return
    try:
        results = run_concurrently(srv, 12)
        bad = [r for r in results if r[1] == "bad"]
        res.check("fault injection: every request ends with its answer or a clean error",
                  not bad, f"{bad}")
        n_err = sum(r[1] == "error" for r in results)
        n_ok = sum(r[1] == "ok" for r in results)
        res.check("fault injection: some requests failed cleanly (500 / SSE error event)",
                  n_err > 0, f"{n_err} errors, {n_ok} ok")
        res.check("fault injection: the others completed", n_ok > 0,
                  f"{n_err} errors, {n_ok} ok")
        res.check("fault injection: KV blocks back to 0", kv_blocks_used(srv) == 0)
        # One forward in five fails: a one-token request succeeds within two tries.
        ok = False
        for _ in range(3):
            st, b, _ = su.http_json("POST", srv.http_url + "/v1/completions",
                                    {"model": MODEL, "prompt": "Hello", "max_tokens": 1})
            ok = ok or st == 200
        res.check("fault injection: the server still serves", ok and srv.proc.poll() is None)
    finally:
        rc = srv.stop()
    res.check("fault injection: exit 0 on SIGTERM", rc == 0, f"exit {rc}\n{srv.log_tail(10)}")


def check_kv_exhaustion(res, args, model_dir):
    # 8 blocks of 16 = one 128-token sequence: 12 concurrent requests must take turns.
    srv = su.Server(args, model_dir, ["--max-model-len", "128", "--block-size", "16",
                                      "--num-kv-blocks", "8"])
    if not started(res, srv, "KV exhaustion"):
        return
    try:
        results = run_concurrently(srv, 12)
        not_ok = [r for r in results if r[1] != "ok"]
        res.check("KV exhaustion: every request completes", not not_ok, f"{not_ok}")
        m = su.metrics(srv.http_url)
        pre = su.metric_value(m, "sampan:num_preemptions_total") + su.metric_value(
            m, "sampan:num_preemptions")
        res.check("KV exhaustion: the engine preempted", pre > 0, f"preemptions {pre}")
        res.check("KV exhaustion: KV blocks back to 0", kv_blocks_used(srv) == 0)
    finally:
        rc = srv.stop()
    res.check("KV exhaustion: exit 0 on SIGTERM", rc == 0, f"exit {rc}\n{srv.log_tail(10)}")


def main():
    args = eu.parse_args(__doc__.split("\n")[0])
    res = eu.Results()
    eu.require_binary(args, res)
    model_dir = su.make_serve_model(args)
    check_fault_injection(res, args, model_dir)
    check_kv_exhaustion(res, args, model_dir)
    res.finish()


if __name__ == "__main__":
    main()
