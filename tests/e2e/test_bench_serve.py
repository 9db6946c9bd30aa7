"""End-to-end: `sampan bench-serve` against a running `sampan serve`.

Small runs on every backend (openai-completions, openai-chat, grpc-generate), open loop (Poisson
and bursty arrivals, a concurrency cap) and closed loop, synthetic prompts and a JSONL dataset.
For each run the figures are checked for consistency with the server: total input / output tokens
equal the sums of the per-request usage fields in the JSON report and the deltas of the server's
Prometheus counters (sampan:prompt_tokens_total, sampan:generation_tokens_total); request counts
equal the delta of sampan:requests_total; --ignore-eos runs generate exactly max_tokens; TTFT <=
E2E; the JSON and HTML reports parse. Then the failure paths: an unreachable URL or gRPC target
(one "error:" line, exit 1, quickly), bad flags (exit 2), and per-request timeouts counted as
errors without a crash. Last, clients that abandon requests on purpose (--disconnect-fraction 0.5,
HTTP and gRPC): about half are counted as disconnected, none as errors, and afterwards the
server's /metrics shows no KV block in use and no request running (it freed every abandoned
request).
"""

import json
import os
import sys
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402
import serve_util as su  # noqa: E402

PROMPT_TOKENS = "sampan:prompt_tokens_total"
GENERATION_TOKENS = "sampan:generation_tokens_total"
REQUESTS = "sampan:requests_total"


def counters(srv):
    m = su.metrics(srv.http_url)
    return {
        "prompt": su.metric_value(m, PROMPT_TOKENS),
        "generation": su.metric_value(m, GENERATION_TOKENS),
        "openai_200": su.metric_value(m, REQUESTS, api="openai", code="200"),
        "grpc_ok": su.metric_value(m, REQUESTS, api="grpc", code="0"),
    }


def bench(args, name, argv):
    """Runs bench-serve with --json/--html into the work dir -> (Run, report dict or None, html)."""
    js = os.path.join(args.work_dir, f"{name}.json")
    html = os.path.join(args.work_dir, f"{name}.html")
    for p in (js, html):
        if os.path.exists(p):
            os.remove(p)
    run = eu.run_sampan(args, ["bench-serve"] + argv + ["--json", js, "--html", html])
    report = None
    html_text = ""
    if os.path.exists(js):
        with open(js) as f:
            report = json.load(f)
    if os.path.exists(html):
        with open(html) as f:
            html_text = f.read()
    return run, report, html_text


def settled_counters(srv, before, rep, api, n_api):
    """The server counts a request just after its last event is on its way: polls (briefly)
    until the counters reach what the report says, so a scrape racing the final bookkeeping
    does not fail the test. Returns the last scrape either way."""
    want_in = rep["summary"]["total_input_tokens"] if rep else 0
    want_out = rep["summary"]["total_output_tokens"] if rep else 0
    deadline = time.monotonic() + 5
    while True:
        after = counters(srv)
        if (after["prompt"] - before["prompt"] >= want_in
                and after["generation"] - before["generation"] >= want_out
                and after[api] - before[api] >= n_api) or time.monotonic() > deadline:
            return after
        time.sleep(0.05)


def check_run(res, srv, args, name, argv, n_requests, api, ignore_eos=True):
    before = counters(srv)
    run, rep, html = bench(args, name, argv)
    # Without --model, the HTTP backends first ask GET /v1/models (one more openai request).
    n_api = n_requests + (1 if api == "openai_200" and "--model" not in argv else 0)
    after = settled_counters(srv, before, rep, api, n_api)
    if not res.check(f"{name}: exit 0", run.returncode == 0, "" if run.returncode == 0
                     else run.describe() + "\nstdout:\n" + run.stdout[-2000:]):
        return None
    if not res.check(f"{name}: JSON report written and parsed", rep is not None):
        return None
    s = rep["summary"]
    reqs = rep["requests"]
    res.check(f"{name}: {n_requests} requests, all ok",
              s["completed"] == n_requests and s["failed"] == 0 and len(reqs) == n_requests
              and all(r["ok"] for r in reqs),
              f"completed {s['completed']} failed {s['failed']} errors {s['errors']}")
    sum_in = sum(r["input_tokens"] or 0 for r in reqs)
    sum_out = sum(r["output_tokens"] or 0 for r in reqs)
    res.check(f"{name}: every request has usage", all(
        r["input_tokens"] is not None and r["output_tokens"] is not None for r in reqs))
    res.check(f"{name}: total tokens == sum of usage fields",
              s["total_input_tokens"] == sum_in and s["total_output_tokens"] == sum_out,
              f"{s['total_input_tokens']}/{sum_in} {s['total_output_tokens']}/{sum_out}")
    d_prompt = after["prompt"] - before["prompt"]
    d_gen = after["generation"] - before["generation"]
    res.check(f"{name}: totals == server counter deltas",
              s["total_input_tokens"] == d_prompt and s["total_output_tokens"] == d_gen,
              f"input {s['total_input_tokens']} vs {PROMPT_TOKENS} +{d_prompt}; output "
              f"{s['total_output_tokens']} vs {GENERATION_TOKENS} +{d_gen}")
    d_req = after[api] - before[api]
    res.check(f"{name}: server counted {n_api} successful requests", d_req == n_api,
              f"{REQUESTS} {api} +{d_req}")
    if ignore_eos:
        res.check(f"{name}: ignore_eos -> output tokens == max_tokens",
                  all(r["output_tokens"] == r["max_tokens"] for r in reqs),
                  str([(r["output_tokens"], r["max_tokens"]) for r in reqs][:5]))
    res.check(f"{name}: 0 < TTFT <= E2E for every request",
              all(r["ttft_s"] is not None and 0 < r["ttft_s"] <= r["e2e_s"] for r in reqs))
    dur = s["duration_s"]
    res.check(f"{name}: throughput figures consistent",
              dur > 0 and abs(s["request_throughput"] - n_requests / dur) < 1e-6 * max(1, n_requests / dur)
              and abs(s["output_throughput"] - sum_out / dur) < 1e-6 * max(1, sum_out / dur),
              f"duration {dur}")
    n_gaps = sum(len(r["itl_s"]) for r in reqs)
    res.check(f"{name}: ITL count == sum of per-request gaps", s["itl"]["count"] == n_gaps,
              f"{s['itl']['count']} vs {n_gaps}")
    try:
        root = ET.fromstring(html.replace("<!DOCTYPE html>", "", 1))
        svgs = [e for e in root.iter() if e.tag.endswith("svg")]
        ok = len(svgs) >= 2 and "<script" not in html and "src=" not in html
        res.check(f"{name}: HTML report parses, has inline SVG charts, no external assets", ok,
                  f"{len(svgs)} svg elements")
    except ET.ParseError as e:
        res.check(f"{name}: HTML report parses", False, str(e))
    res.check(f"{name}: summary table on stdout", "Successful requests:" in run.stdout
              and "TTFT" in run.stdout, run.stdout[-500:])
    return rep


def check_input_lengths(res, rep, name, extra):
    # Synthetic words are one token each; the server adds `extra` (BOS) tokens.
    bad = [r for r in rep["requests"]
           if abs(r["input_tokens"] - (r["expected_input_tokens"] + extra)) > 2]
    res.check(f"{name}: synthetic prompts tokenize to ~the requested length", not bad,
              str([(r["input_tokens"], r["expected_input_tokens"]) for r in bad][:5]))


def idle_gauges(srv, timeout=20):
    """Polls /metrics until no KV block is used and nothing runs or waits (bounded) -> the last
    (kv_blocks_used, running, waiting)."""
    deadline = time.monotonic() + timeout
    while True:
        m = su.metrics(srv.http_url)
        g = (su.metric_value(m, "sampan:kv_cache_blocks_used"),
             su.metric_value(m, "sampan:num_requests_running"),
             su.metric_value(m, "sampan:num_requests_waiting"))
        if g == (0, 0, 0) or time.monotonic() > deadline:
            return g
        time.sleep(0.1)


def check_disconnects(res, args, srv):
    """--disconnect-fraction 0.5: about half the requests abandoned on purpose (closed connection
    or cancelled call, before the response or after 1..8 chunks), counted apart, never as errors;
    the server frees every one of them."""
    n = 40
    for backend, target in (("openai-completions", ["--url", srv.http_url]),
                            ("grpc-generate", ["--grpc", srv.grpc_addr])):
        name = f"disconnect-{backend}"
        run, rep, html = bench(args, name, [
            "--backend", backend, "--concurrency", "8", "--num-requests", str(n),
            "--input-len", "16", "--output-len", "40", "--ignore-eos", "--seed", "5",
            "--disconnect-fraction", "0.5"] + target)
        if not res.check(f"{name}: exit 0, JSON report", run.returncode == 0 and rep is not None,
                         run.describe() + "\nstdout:\n" + run.stdout[-2000:]):
            continue
        s = rep["summary"]
        reqs = rep["requests"]
        d = s["disconnected"]
        res.check(f"{name}: about half disconnected, zero errors, the rest completed",
                  0.3 * n <= d <= 0.7 * n and s["failed"] == 0 and not s["errors"]
                  and s["completed"] + d == n and len(reqs) == n,
                  f"completed {s['completed']} disconnected {d} failed {s['failed']} "
                  f"errors {s['errors']}")
        marked = [r for r in reqs if r.get("disconnected")]
        res.check(f"{name}: the disconnected requests are marked, without an error kind",
                  len(marked) == d and all(not r["ok"] and "error_kind" not in r for r in marked))
        ok = [r for r in reqs if r["ok"]]
        res.check(f"{name}: figures only over the completed requests",
                  s["e2e"]["count"] == len(ok) and s["ttft"]["count"] == len(ok)
                  and s["total_output_tokens"] == sum(r["output_tokens"] for r in ok)
                  and all(r["output_tokens"] == r["max_tokens"] for r in ok),
                  f"e2e count {s['e2e']['count']} vs {len(ok)}")
        res.check(f"{name}: the text report counts them",
                  f"disconnected on purpose:" in run.stdout
                  and run.stdout.split("disconnected on purpose:")[1].split()[0] == str(d),
                  run.stdout[-800:])
        res.check(f"{name}: the HTML report counts them", "Disconnected on purpose" in html)
        kv, running, waiting = idle_gauges(srv)
        res.check(f"{name}: afterwards the server holds no KV block and runs nothing",
                  kv == 0 and running == 0 and waiting == 0,
                  f"sampan:kv_cache_blocks_used {kv}, sampan:num_requests_running {running}, "
                  f"sampan:num_requests_waiting {waiting}\nserver log:\n" + srv.log_tail(15))
    for bad in ("1.5", "-0.1", "nan"):
        run = eu.run_sampan(args, ["bench-serve", "--url", srv.http_url,
                                   "--disconnect-fraction", bad], timeout=60)
        lines = run.stderr.strip().split("\n")
        res.check(f"bad flag --disconnect-fraction {bad}: one error line naming it, exit 2",
                  run.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:")
                  and "--disconnect-fraction" in lines[0], run.describe())


def check_failures(res, args, srv):
    free = su.free_port()
    t0 = time.monotonic()
    run = eu.run_sampan(args, ["bench-serve", "--url", f"http://127.0.0.1:{free}",
                               "--num-requests", "3"], timeout=60)
    res.check("unreachable URL: exit 1 with one error line, fast",
              run.returncode == 1 and run.stderr.strip().startswith("error:")
              and len(run.stderr.strip().split("\n")) == 1 and "cannot reach" in run.stderr
              and time.monotonic() - t0 < 30, run.describe())
    run = eu.run_sampan(args, ["bench-serve", "--backend", "grpc-generate", "--grpc",
                               f"127.0.0.1:{free}", "--connect-timeout", "2"], timeout=60)
    res.check("unreachable gRPC target: exit 1 with one error line",
              run.returncode == 1 and run.stderr.strip().startswith("error:")
              and "cannot reach" in run.stderr, run.describe())
    bad_flags = [
        ["--backend", "nope", "--url", srv.http_url],
        [],  # no --url
        ["--url", srv.http_url, "--concurrency", "2", "--request-rate", "5"],
        ["--url", srv.http_url, "--request-rate", "-1"],
        ["--url", srv.http_url, "--burstiness", "0"],
        ["--url", srv.http_url, "--input-len-range", "1.5"],
        ["--url", srv.http_url, "--goodput", "ttft:fast"],
        ["--url", "ftp://127.0.0.1:1"],
        ["--backend", "grpc-generate", "--url", srv.http_url],
        ["--url", srv.http_url, "--extra-body", "[1, 2]"],
        ["--url", srv.http_url, "--num-requests", "0"],
        ["--url", srv.http_url, "--no-such-flag"],
    ]
    for argv in bad_flags:
        run = eu.run_sampan(args, ["bench-serve"] + argv, timeout=60)
        lines = run.stderr.strip().split("\n")
        res.check(f"bad flags {argv[-2:] if argv else '(none)'}: one error line, exit 2",
                  run.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"),
                  run.describe())
    # Every request times out: counted as errors, the run still reports (exit 1: none succeeded).
    run, rep, _ = bench(args, "timeouts", [
        "--url", srv.http_url, "--num-requests", "3", "--input-len", "8", "--output-len", "1500",
        "--ignore-eos", "--timeout", "0.3"])
    res.check("per-request timeouts: counted by kind, report written, exit 1",
              run.returncode == 1 and rep is not None
              and rep["summary"]["errors"].get("timeout") == 3
              and "timeout" in run.stdout, run.describe())
    # A prompt the model cannot take: the server's 400 is counted as http_400.
    run, rep, _ = bench(args, "http400", [
        "--url", srv.http_url, "--num-requests", "2", "--input-len", "3000", "--output-len", "2"])
    res.check("server rejections counted as http_400",
              rep is not None and rep["summary"]["errors"].get("http_400") == 2, run.describe())


def main():
    args = eu.parse_args(__doc__.split("\n")[0])
    res = eu.Results()
    eu.require_binary(args, res)
    model_dir = su.make_serve_model(args)
    srv = su.Server(args, model_dir, ["--max-model-len", "2048"],
                    env={"SAMPAN_LOG_LEVEL": "warn"})
    try:
        srv.start()
        srv.wait_ready()
    except Exception as e:
        res.check("sampan serve starts and becomes ready", False, str(e))
        srv.stop()
        res.finish()
    try:
        common = ["--input-len", "24", "--output-len", "12", "--ignore-eos", "--seed", "3"]
        rep = check_run(res, srv, args, "completions-closed", [
            "--backend", "openai-completions", "--url", srv.http_url, "--concurrency", "3",
            "--num-requests", "8", "--input-len-range", "0.5", "--output-len-range", "0.5"]
            + common, 8, "openai_200")
        if rep:
            check_input_lengths(res, rep, "completions-closed", 1)
            res.check("completions-closed: model discovered from /v1/models",
                      rep["model"] == "serve-model", rep["model"])
        check_run(res, srv, args, "completions-poisson", [
            "--url", srv.http_url, "--request-rate", "20", "--num-requests", "6",
            "--model", "serve-model"] + common, 6, "openai_200")
        check_run(res, srv, args, "chat-bursty-capped", [
            "--backend", "openai-chat", "--url", srv.http_url, "--request-rate", "30",
            "--burstiness", "0.3", "--max-concurrency", "2", "--num-requests", "6"] + common,
            6, "openai_200")
        rep = check_run(res, srv, args, "grpc-closed", [
            "--backend", "grpc-generate", "--grpc", srv.grpc_addr, "--concurrency", "2",
            "--num-requests", "6"] + common, 6, "grpc_ok")
        if rep:
            check_input_lengths(res, rep, "grpc-closed", 1)
            res.check("grpc-closed: streamed token counts == usage",
                      all(r["counted_tokens"] == r["output_tokens"] for r in rep["requests"]))
        check_run(res, srv, args, "grpc-poisson", [
            "--backend", "grpc-generate", "--grpc", srv.grpc_addr, "--request-rate", "25",
            "--num-requests", "5"] + common, 5, "grpc_ok")

        dataset = os.path.join(args.work_dir, "prompts.jsonl")
        with open(dataset, "w") as f:
            f.write(json.dumps({"prompt": "Once upon a time", "max_tokens": 5}) + "\n")
            f.write(json.dumps({"messages": [{"role": "user", "content": "Tell me a story"}],
                                "max_tokens": 7}) + "\n")
            f.write("\n")
            f.write(json.dumps({"prompt": "The little dog"}) + "\n")
        for backend, target, api in (("openai-chat", ["--url", srv.http_url], "openai_200"),
                                     ("grpc-generate", ["--grpc", srv.grpc_addr], "grpc_ok")):
            rep = check_run(res, srv, args, f"dataset-{backend}", [
                "--backend", backend, "--dataset", dataset, "--concurrency", "2",
                "--output-len", "9", "--ignore-eos"] + target, 3, api)
            if rep:
                res.check(f"dataset-{backend}: max_tokens from the lines, else --output-len",
                          [r["max_tokens"] for r in rep["requests"]] == [5, 7, 9])
        run = eu.run_sampan(args, ["bench-serve", "--url", srv.http_url, "--dataset", dataset])
        res.check("dataset with messages on openai-completions: clear error",
                  run.returncode == 1 and "messages" in run.stderr, run.describe())

        # --duration: stops issuing after ~1 s; closed loop keeps the server busy meanwhile.
        t0 = time.monotonic()
        run, rep, _ = bench(args, "duration", [
            "--url", srv.http_url, "--duration", "1", "--concurrency", "2", "--input-len", "8",
            "--output-len", "4", "--ignore-eos"])
        res.check("--duration 1: ends, some requests, none failed",
                  run.returncode == 0 and rep is not None and rep["summary"]["completed"] > 0
                  and rep["summary"]["failed"] == 0 and time.monotonic() - t0 < 60,
                  run.describe())

        check_failures(res, args, srv)
        check_disconnects(res, args, srv)
        st, _, _ = su.http_json("GET", srv.http_url + "/v2/health/ready")
        res.check("server still ready after the load tests", st == 200, f"status {st}")
    except Exception as e:
        res.check("no unexpected exception", False, f"{type(e).__name__}: {e}\nserver log:\n"
                  + srv.log_tail(15))
    finally:
        rc = srv.stop()
        res.check("server exits 0 on SIGTERM", rc == 0, f"exit {rc}")
    res.finish()


if __name__ == "__main__":
    main()
