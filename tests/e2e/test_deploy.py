#!/usr/bin/env python3
"""Checks the deployment files under deploy/ and runs a real Prometheus against `sampan serve`.

1. Every YAML under deploy/ parses; the Kubernetes manifests, compose files and Prometheus config
   agree with each other and with the server (probe paths, ports, model mount, grace periods).
2. The Dockerfiles, read instruction by instruction: stages and base images, scripts/setup.sh
   --build-only in the build stage, a non-root USER, HEALTHCHECK / EXPOSE / ENTRYPOINT / CMD
   consistent with the manifests; deploy/runtime_packages.sh (which the images use) run on the
   tested binary.
3. promtool (a missing one fails: scripts/setup.sh installs it); kubectl when installed (not a
   Debian package: the structural checks of step 1 are the test, kubectl an extra).
4. A Prometheus scraping a running `sampan serve` every second ends up with the values the
   server's own /metrics shows.

No docker daemon is assumed: images are not built here.
"""

import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_util import Results, parse_args, require_binary  # noqa: E402
from serve_util import Server, free_port, http_json, make_serve_model, metrics  # noqa: E402

import yaml  # noqa: E402  (python3-yaml, installed by scripts/setup.sh)

HTTP_PORT = 8000
GRPC_PORT = 8001
LIVE_PATH = "/v2/health/live"
READY_PATH = "/v2/health/ready"


def missing(res, name, why):
    """A required tool is missing: a failure, never a skip."""
    res.check(name, False, why)


# ---- helpers --------------------------------------------------------------------------------

def flag_value(argv, flag):
    """Value of `--flag V` or `--flag=V` in an argv list; None when absent."""
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a[len(flag) + 1:]
    return None


def under(path, mount):
    mount = mount.rstrip("/")
    return path == mount or path.startswith(mount + "/")


def duration_s(v):
    """Compose durations ('40s', '1m30s') or plain numbers -> seconds."""
    if isinstance(v, (int, float)):
        return float(v)
    total, units = 0.0, {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"([\d.]+)(ms|h|m|s)", str(v))
    if not parts:
        raise ValueError(f"not a duration: {v!r}")
    for num, unit in parts:
        total += float(num) * units[unit]
    return total


def volume_target(v):
    """Compose short volume syntax SRC:TARGET[:MODE] -> TARGET (SRC may hold ${VAR:?msg})."""
    parts = str(v).rsplit(":", 2)
    if len(parts) == 3 and parts[2] in ("ro", "rw", "z", "Z"):
        return parts[1]
    return parts[-1]


def load_yaml_files(deploy_dir, res):
    """-> {relative path: [documents]} for every *.yaml / *.yml under deploy/."""
    out = {}
    paths = sorted(glob.glob(os.path.join(deploy_dir, "**", "*.y*ml"), recursive=True))
    for p in paths:
        rel = os.path.relpath(p, os.path.dirname(deploy_dir))
        try:
            with open(p) as f:
                out[rel] = [d for d in yaml.safe_load_all(f) if d is not None]
            res.check(f"yaml parses: {rel}", bool(out[rel]), f"{len(out[rel])} document(s)")
        except yaml.YAMLError as e:
            res.check(f"yaml parses: {rel}", False, str(e).replace("\n", " "))
    return out


# ---- 1. Kubernetes manifests ----------------------------------------------------------------

def container_port(container, port):
    """A probe/Service port (number or container port name) -> number, or None."""
    for p in container.get("ports") or []:
        if port == p.get("containerPort") or port == p.get("name"):
            return p.get("containerPort")
    return port if isinstance(port, int) else None


def check_k8s(docs_by_file, res):
    k8s = [d for rel, docs in docs_by_file.items() if "/k8s/" in "/" + rel for d in docs]
    by_kind = {}
    for d in k8s:
        by_kind.setdefault(d.get("kind"), []).append(d)
    for kind in ("Deployment", "Service", "HorizontalPodAutoscaler", "PersistentVolumeClaim"):
        res.check(f"k8s: one {kind}", len(by_kind.get(kind, [])) == 1,
                  f"found {len(by_kind.get(kind, []))}")
    if any(len(by_kind.get(k, [])) != 1 for k in ("Deployment", "Service")):
        return None
    dep = by_kind["Deployment"][0]
    pod = dep["spec"]["template"]
    pod_labels = pod["metadata"].get("labels") or {}
    sel = dep["spec"]["selector"].get("matchLabels") or {}
    res.check("k8s: Deployment selector matches its pod labels",
              sel and all(pod_labels.get(k) == v for k, v in sel.items()), f"{sel}")
    spec = pod["spec"]
    c = spec["containers"][0]
    args = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
    res.check("k8s: container runs `serve`", "serve" in args, " ".join(args))

    http = container_port(c, "http")
    ports = {p.get("containerPort") for p in c.get("ports") or []}
    res.check("k8s: container ports 8000 and 8001", {HTTP_PORT, GRPC_PORT} <= ports, f"{ports}")
    for flag, want in (("--http-port", HTTP_PORT), ("--grpc-port", GRPC_PORT)):
        v = flag_value(args, flag)
        res.check(f"k8s: {flag} agrees with containerPort", v is None or int(v) == want,
                  f"{flag} {v}")

    for probe, path in (("livenessProbe", LIVE_PATH), ("readinessProbe", READY_PATH)):
        g = (c.get(probe) or {}).get("httpGet") or {}
        port = container_port(c, g.get("port"))
        res.check(f"k8s: {probe} GET {path} on the HTTP port",
                  g.get("path") == path and port == HTTP_PORT, f"{g}")
    sp = (c.get("startupProbe") or {}).get("httpGet") or {}
    if sp:
        res.check("k8s: startupProbe on a health path",
                  sp.get("path") in (LIVE_PATH, READY_PATH) and
                  container_port(c, sp.get("port")) == HTTP_PORT, f"{sp}")

    limits = (c.get("resources") or {}).get("limits") or {}
    res.check("k8s: limits nvidia.com/gpu", int(limits.get("nvidia.com/gpu", 0)) >= 1,
              f"{limits}")

    model = flag_value(args, "--model")
    mounts = {m["name"]: m for m in c.get("volumeMounts") or []}
    vols = {v["name"]: v for v in spec.get("volumes") or []}
    hit = [m for m in mounts.values() if model and under(model, m["mountPath"])]
    res.check("k8s: a volume is mounted where --model points", bool(hit),
              f"--model {model}, mounts {[m['mountPath'] for m in mounts.values()]}")
    pvcs = {p["metadata"]["name"] for p in by_kind.get("PersistentVolumeClaim", [])}
    if hit:
        claim = ((vols.get(hit[0]["name"]) or {}).get("persistentVolumeClaim") or {})
        res.check("k8s: the model volume is the PVC", claim.get("claimName") in pvcs,
                  f"claim {claim.get('claimName')}, PVCs {sorted(pvcs)}")

    grace = float(flag_value(args, "--shutdown-grace") or 30)  # 30: serve_config.h default
    pre = (((c.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command")
    pre_s = float(pre[1]) if pre and len(pre) == 2 and pre[0].endswith("sleep") else 0.0
    tgp = spec.get("terminationGracePeriodSeconds", 30)
    res.check("k8s: terminationGracePeriodSeconds > preStop + --shutdown-grace",
              tgp > pre_s + grace, f"{tgp} vs {pre_s} + {grace}")

    sc = {**(spec.get("securityContext") or {}), **(c.get("securityContext") or {})}
    res.check("k8s: runs as non-root", sc.get("runAsNonRoot") is True and
              sc.get("runAsUser", 0) != 0, f"{sc}")

    svc = by_kind["Service"][0]
    ssel = svc["spec"].get("selector") or {}
    res.check("k8s: Service selects the Deployment's pods",
              ssel and all(pod_labels.get(k) == v for k, v in ssel.items()), f"{ssel}")
    sports = {p["port"]: container_port(c, p.get("targetPort", p["port"]))
              for p in svc["spec"].get("ports") or []}
    res.check("k8s: Service exposes 8000 and 8001 onto the container's ports",
              sports.get(HTTP_PORT) == HTTP_PORT and sports.get(GRPC_PORT) == GRPC_PORT,
              f"{sports}")

    for hpa in by_kind.get("HorizontalPodAutoscaler", []):
        ref = hpa["spec"]["scaleTargetRef"]
        res.check("k8s: HPA targets the Deployment",
                  ref.get("kind") == "Deployment" and
                  ref.get("name") == dep["metadata"]["name"], f"{ref}")
        res.check("k8s: HPA min <= max", 1 <= hpa["spec"].get("minReplicas", 1) <=
                  hpa["spec"]["maxReplicas"], "")
    for pdb in by_kind.get("PodDisruptionBudget", []):
        psel = pdb["spec"]["selector"].get("matchLabels") or {}
        res.check("k8s: PodDisruptionBudget selects the pods",
                  psel and all(pod_labels.get(k) == v for k, v in psel.items()), f"{psel}")
    return {"model": model, "grace": grace, "args": args}


# ---- compose and Prometheus config ----------------------------------------------------------

def check_compose(deploy_dir, docs_by_file, res):
    comp = (docs_by_file.get("deploy/docker-compose.yaml") or [None])[0]
    if not res.check("compose: deploy/docker-compose.yaml present", isinstance(comp, dict)):
        return
    svcs = comp.get("services") or {}
    res.check("compose: services sampan + prometheus", {"sampan", "prometheus"} <= set(svcs),
              f"{sorted(svcs)}")
    s = svcs.get("sampan") or {}
    cmd = [str(a) for a in s.get("command") or []]
    build = s.get("build") or {}
    ctx = os.path.normpath(os.path.join(deploy_dir, build.get("context", ".")))
    res.check("compose: build uses an existing Dockerfile",
              os.path.isfile(os.path.join(ctx, build.get("dockerfile", "Dockerfile"))),
              f"{build}")
    published = {str(p).split(":")[-1] for p in s.get("ports") or []}
    res.check("compose: publishes 8000 and 8001", {"8000", "8001"} <= published, f"{published}")
    model = flag_value(cmd, "--model")
    targets = [volume_target(v) for v in s.get("volumes") or []]
    res.check("compose: a volume is mounted where --model points",
              any(model and under(model, t) for t in targets), f"--model {model}, {targets}")
    hc = " ".join(str(x) for x in (s.get("healthcheck") or {}).get("test") or [])
    res.check("compose: healthcheck on the ready endpoint",
              f":{HTTP_PORT}{READY_PATH}" in hc, hc)
    grace = float(flag_value(cmd, "--shutdown-grace") or 30)
    stop = duration_s(s.get("stop_grace_period", "10s"))
    res.check("compose: stop_grace_period > --shutdown-grace", stop > grace,
              f"{stop} vs {grace}")
    prom = svcs.get("prometheus") or {}
    mounted = [str(v) for v in prom.get("volumes") or []]
    res.check("compose: prometheus mounts deploy/prometheus.yml",
              any(v.startswith("./prometheus.yml:") for v in mounted), f"{mounted}")

    gpu = (docs_by_file.get("deploy/docker-compose.gpu.yaml") or [None])[0]
    if gpu is not None:
        gs = (gpu.get("services") or {}).get("sampan") or {}
        devs = (((gs.get("deploy") or {}).get("resources") or {}).get("reservations") or
                {}).get("devices") or []
        res.check("compose gpu override: reserves an nvidia GPU",
                  any(d.get("driver") == "nvidia" for d in devs), f"{devs}")
        df = (gs.get("build") or {}).get("dockerfile")
        res.check("compose gpu override: builds an existing Dockerfile",
                  df is not None and os.path.isfile(os.path.join(ctx, df)), f"{df}")


def check_prometheus_config(docs_by_file, res):
    cfg = (docs_by_file.get("deploy/prometheus.yml") or [None])[0]
    if not res.check("prometheus.yml present", isinstance(cfg, dict)):
        return
    found = False
    for job in cfg.get("scrape_configs") or []:
        path = job.get("metrics_path", "/metrics")
        for sc in job.get("static_configs") or []:
            if f"sampan:{HTTP_PORT}" in (sc.get("targets") or []) and path == "/metrics":
                found = True
    res.check("prometheus.yml scrapes sampan:8000/metrics", found)


# ---- 2. Dockerfiles -------------------------------------------------------------------------

def dockerfile_instructions(path):
    """-> list of (INSTRUCTION, argument text), continuation lines joined, comments dropped."""
    out, cur = [], ""
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not cur and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if cur and line.lstrip().startswith("#"):
                continue  # comment lines inside a continuation are dropped by Docker too
            if line.endswith("\\"):
                cur += line[:-1] + " "
                continue
            cur += line
            word, _, rest = cur.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            cur = ""
    return out


def expand_args(text, args):
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)),
                  text)


def stages(instr):
    """-> list of dicts {image, name, instr: [(INSTR, text)]}, FROM images with ARGs expanded."""
    global_args, out = {}, []
    for word, text in instr:
        if word == "ARG" and not out:
            k, _, v = text.partition("=")
            global_args[k.strip()] = v.strip().strip('"')
        elif word == "FROM":
            parts = text.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            out.append({"image": expand_args(parts[0], global_args), "name": name, "instr": []})
        elif out:
            out[-1]["instr"].append((word, text))
    return out


def check_dockerfile(src, rel, base_build, base_run, res, routes_text):
    path = os.path.join(src, rel)
    if not res.check(f"{rel}: present", os.path.isfile(path)):
        return
    st = stages(dockerfile_instructions(path))
    res.check(f"{rel}: multi-stage (build, runtime)", len(st) >= 2 and st[0]["name"] == "build",
              f"{[(s['name'], s['image']) for s in st]}")
    if len(st) < 2:
        return
    build, run = st[0], st[-1]
    res.check(f"{rel}: build stage FROM {base_build}", re.fullmatch(base_build, build["image"])
              is not None, build["image"])
    res.check(f"{rel}: runtime stage FROM {base_run}", re.fullmatch(base_run, run["image"])
              is not None, run["image"])
    runs = " ".join(t for w, t in build["instr"] if w == "RUN")
    res.check(f"{rel}: build stage runs scripts/setup.sh and scripts/build.sh",
              "scripts/setup.sh" in runs and "scripts/build.sh" in runs)
    # Only what building needs goes into the image: every setup.sh run is --build-only (no test
    # tools, no pip packages), and setup.sh knows the option.
    setup_runs = re.findall(r"scripts/setup\.sh([^&;|]*)", runs)
    with open(os.path.join(src, "scripts", "setup.sh")) as f:
        setup_text = f.read()
    res.check(f"{rel}: build stage runs scripts/setup.sh --build-only",
              bool(setup_runs) and all("--build-only" in a.split() for a in setup_runs) and
              "--build-only)" in setup_text, f"setup.sh args {setup_runs}")
    for w, t in build["instr"] + run["instr"]:
        if w == "COPY" and "--from=" not in t:
            srcs = shlex.split(t)[:-1]
            ok = all(s == "." or os.path.exists(os.path.join(src, s)) for s in srcs)
            res.check(f"{rel}: COPY sources exist ({' '.join(srcs)})", ok)
    for opt in re.findall(r"-D(SAMPAN_\w+)=", runs):
        res.check(f"{rel}: CMake option {opt} exists",
                  opt in open(os.path.join(src, "CMakeLists.txt")).read())
    users = [t for w, t in run["instr"] if w == "USER"]
    res.check(f"{rel}: runtime USER is not root",
              bool(users) and users[-1].split(":")[0] not in ("root", "0"), f"{users}")
    rruns = " ".join(t for w, t in run["instr"] if w == "RUN")
    res.check(f"{rel}: runtime installs curl (for HEALTHCHECK)", re.search(r"\bcurl\b", rruns)
              is not None)
    hc = " ".join(t for w, t in run["instr"] if w == "HEALTHCHECK")
    m = re.search(r"curl\b.*?https?://[^/\s:]+:(\d+)(/\S*)", hc)
    res.check(f"{rel}: HEALTHCHECK curls {READY_PATH} on {HTTP_PORT}",
              m is not None and int(m.group(1)) == HTTP_PORT and m.group(2) == READY_PATH, hc)
    if m:
        res.check(f"{rel}: HEALTHCHECK path is a public server route",
                  f'"{m.group(2)}"' in routes_text, m.group(2))
    exposed = {int(p.split("/")[0]) for w, t in run["instr"] if w == "EXPOSE" for p in t.split()}
    res.check(f"{rel}: EXPOSE 8000 8001", {HTTP_PORT, GRPC_PORT} <= exposed, f"{exposed}")
    ep = [json.loads(t) for w, t in run["instr"] if w == "ENTRYPOINT"]
    res.check(f"{rel}: ENTRYPOINT [\"sampan\"]", ep and ep[-1] == ["sampan"], f"{ep}")
    cmd = [json.loads(t) for w, t in run["instr"] if w == "CMD"]
    cmd = cmd[-1] if cmd else []
    res.check(f"{rel}: CMD serves /models/model on 8000/8001",
              cmd[:1] == ["serve"] and flag_value(cmd, "--model") == "/models/model" and
              flag_value(cmd, "--http-port") in (None, str(HTTP_PORT)) and
              flag_value(cmd, "--grpc-port") in (None, str(GRPC_PORT)), f"{cmd}")
    return cmd


def check_runtime_packages(args, src, res):
    script = os.path.join(src, "deploy", "runtime_packages.sh")
    lib = os.path.join(os.path.dirname(args.sampan), "libsampan.so")
    if shutil.which("dpkg") is None or shutil.which("ldd") is None:
        missing(res, "runtime_packages.sh", "no dpkg/ldd on this machine")
        return
    p = subprocess.run(["bash", script, args.sampan] + ([lib] if os.path.exists(lib) else []),
                       capture_output=True, text=True, timeout=120)
    pkgs = p.stdout.split()
    res.check("runtime_packages.sh lists the binary's packages",
              p.returncode == 0 and any(x.startswith("libgrpc++") for x in pkgs) and
              any(x.startswith("libprotobuf") for x in pkgs),
              f"rc {p.returncode}: {' '.join(pkgs)} {p.stderr.strip()[-300:]}")
    bad = [x for x in pkgs if subprocess.run(["dpkg", "-s", x], capture_output=True).returncode]
    res.check("runtime_packages.sh names installed packages", pkgs and not bad, f"{bad}")


# ---- 3. kubectl and promtool ----------------------------------------------------------------

def check_kubectl(src, res):
    kubectl = shutil.which("kubectl")
    k8s_dir = os.path.join(src, "deploy", "k8s")
    if kubectl is None:
        print("NOTE kubectl not installed: its extra decoding check does not run", flush=True)
        return
    files = sorted(glob.glob(os.path.join(k8s_dir, "*.yaml")))
    # With a reachable cluster: the real client-side dry run (needs API discovery).
    p = subprocess.run([kubectl, "apply", "--dry-run=client", "--validate=false", "-o", "name",
                        "-f", k8s_dir, "--request-timeout=5s"],
                       capture_output=True, text=True, timeout=60)
    if p.returncode == 0:
        res.check("kubectl apply --dry-run=client", True, p.stdout.strip().replace("\n", ", "))
        return
    print("NOTE kubectl: no cluster reachable; offline decoding instead", flush=True)
    # Offline: `--local` commands decode the manifests without a server; `set env` decodes
    # workload objects into their typed Go structs, so a wrong field type fails.
    p = subprocess.run([kubectl, "label", "--local", "--dry-run=client", "-o", "name",
                        "-f", k8s_dir, "deploy-check=1"],
                       capture_output=True, text=True, timeout=60)
    names = p.stdout.split()
    res.check("kubectl label --local: every manifest decodes",
              p.returncode == 0 and len(names) == len(files), f"{names} {p.stderr.strip()}")
    p = subprocess.run([kubectl, "set", "env", "--local", "-o", "name", "-f",
                        os.path.join(k8s_dir, "deployment.yaml"), "DEPLOY_CHECK=1"],
                       capture_output=True, text=True, timeout=60)
    res.check("kubectl set env --local: Deployment decodes into its typed object",
              p.returncode == 0, (p.stdout + p.stderr).strip())


def check_promtool(src, res):
    promtool = shutil.which("promtool")
    if promtool is None:
        missing(res, "promtool check config", "promtool not installed (Debian package `prometheus`)")
        return
    p = subprocess.run([promtool, "check", "config",
                        os.path.join(src, "deploy", "prometheus.yml")],
                       capture_output=True, text=True, timeout=60)
    res.check("promtool check config deploy/prometheus.yml", p.returncode == 0,
              (p.stdout + p.stderr).strip().replace("\n", " "))


# ---- 4. a real Prometheus scraping a running server ----------------------------------------

def prom_query(base, query):
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.loads(r.read().decode())
    if body.get("status") != "success":
        raise RuntimeError(f"{query}: {body}")
    return {frozenset((k, v) for k, v in s["metric"].items() if not k.startswith("__") and
                      k not in ("job", "instance")): float(s["value"][1])
            for s in body["data"]["result"]}


def server_series(m, name, **want):
    return {frozenset(ls): v for (n, ls), v in m.items()
            if n == name and set(want.items()) <= set(ls)}


def fmt(series):
    return ", ".join("{" + ",".join(f'{k}="{v}"' for k, v in sorted(ls)) + f"}} {v:g}"
                     for ls, v in sorted(series.items(), key=lambda kv: sorted(kv[0])))


class ManifestServer(Server):
    """`sampan` run with the Deployment's own args, only the model and the ports swapped for
    local ones: the flags the manifests pass must be ones the binary accepts."""

    def __init__(self, args, model_dir, manifest_args):
        super().__init__(args, model_dir)
        self.manifest_args = manifest_args

    def argv(self):
        local = {"--model": self.model_dir, "--http-port": str(self.http_port),
                 "--grpc-port": str(self.grpc_port), "--host": "127.0.0.1"}
        out, it = [], iter(self.manifest_args)
        for a in it:
            out.append(a)
            if a in local:
                next(it, None)
                out.append(local.pop(a))
        for k, v in local.items():
            out += [k, v]
        return [self.args.sampan] + out


def check_prometheus_scrape(args, res, manifest_args):
    prom = shutil.which("prometheus")
    if prom is None:
        missing(res, "prometheus scrapes sampan",
                "prometheus not installed (Debian package `prometheus`)")
        return
    model = make_serve_model(args)
    work = tempfile.mkdtemp(prefix="prom-", dir=args.work_dir)
    if manifest_args:
        srv = ManifestServer(args, model, manifest_args)
        print("serving with the Deployment's args: " + " ".join(srv.argv()[1:]), flush=True)
    else:
        srv = Server(args, model, extra_args=["--shutdown-grace", "5"])
    with srv:
        for path in (LIVE_PATH, READY_PATH):
            st, _, _ = http_json("GET", srv.http_url + path)
            res.check(f"probe path {path} answers 200 on a loaded server", st == 200, f"{st}")
        cfg = os.path.join(work, "prometheus.yml")
        with open(cfg, "w") as f:
            yaml.safe_dump({"global": {"scrape_interval": "1s"},
                            "scrape_configs": [{"job_name": "sampan", "scrape_interval": "1s",
                                                "scrape_timeout": "1s",
                                                "metrics_path": "/metrics",
                                                "static_configs": [{"targets": [
                                                    f"127.0.0.1:{srv.http_port}"]}]}]}, f)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log = open(os.path.join(work, "prometheus.log"), "wb")
        p = subprocess.Popen([prom, f"--config.file={cfg}",
                              f"--storage.tsdb.path={os.path.join(work, 'tsdb')}",
                              f"--web.listen-address=127.0.0.1:{port}"],
                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            st, body, _ = http_json("POST", srv.http_url + "/v1/completions",
                                    {"model": os.path.basename(model), "prompt": "Hello",
                                     "max_tokens": 4})
            res.check("one completion", st == 200, f"{st} {str(body)[:200]}")
            # Counted per request, so /metrics scrapes (api="other") move on; the completions
            # (api="openai") and the KV cache size stay put once the request is done.
            want_req = server_series(metrics(srv.http_url), "sampan:requests_total",
                                     api="openai")
            want_kv = server_series(metrics(srv.http_url), "sampan:kv_cache_blocks_total")
            got_req, got_kv, err = {}, {}, ""
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                if p.poll() is not None:
                    err = f"prometheus exited with {p.returncode}"
                    break
                try:
                    got_req = prom_query(base, 'sampan:requests_total{api="openai"}')
                    got_kv = prom_query(base, "sampan:kv_cache_blocks_total")
                    err = ""
                    if got_req == want_req and got_kv == want_kv:
                        break
                except (OSError, RuntimeError, ValueError) as e:
                    err = str(e)
                time.sleep(0.5)
            res.check("prometheus: sampan:requests_total{api=openai} as /metrics shows",
                      bool(want_req) and got_req == want_req,
                      f"prometheus {fmt(got_req)}, server {fmt(want_req)} {err}")
            res.check("prometheus: sampan:kv_cache_blocks_total as /metrics shows",
                      bool(want_kv) and got_kv == want_kv and
                      next(iter(want_kv.values())) > 0,
                      f"prometheus {fmt(got_kv)}, server {fmt(want_kv)} {err}")
            try:
                with urllib.request.urlopen(base + "/api/v1/targets", timeout=5) as r:
                    tg = json.loads(r.read().decode())["data"]["activeTargets"]
                res.check("prometheus: the sampan target is up",
                          [t.get("health") for t in tg] == ["up"],
                          "; ".join(f"{t.get('scrapeUrl')} {t.get('health')} {t.get('lastError')}"
                                    for t in tg))
            except OSError as e:
                res.check("prometheus: the sampan target is up", False, str(e))
        finally:
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            log.close()
        rc = srv.stop()
        res.check("sampan exits 0 on SIGTERM", rc == 0, f"{rc}")
    shutil.rmtree(work, ignore_errors=True)


def guarded(res, section, fn, *a):
    """A manifest missing a required field is one FAIL line naming it, not a traceback."""
    try:
        return fn(*a)
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
        res.check(f"{section}: well-formed", False, f"{type(e).__name__}: {e}")
        return None


def main():
    args = parse_args(__doc__.split("\n")[0])
    res = Results()
    require_binary(args, res)
    src = args.source_dir
    deploy_dir = os.path.join(src, "deploy")
    with open(os.path.join(src, "server", "http_server.h")) as f:
        routes_text = f.read()  # the public (auth-free) paths, health endpoints among them

    docs = load_yaml_files(deploy_dir, res)
    k8s = guarded(res, "k8s manifests", check_k8s, docs, res)
    guarded(res, "compose files", check_compose, deploy_dir, docs, res)
    guarded(res, "prometheus.yml", check_prometheus_config, docs, res)

    cuda_cmd = guarded(res, "deploy/Dockerfile", check_dockerfile, src, "deploy/Dockerfile",
                       r"nvidia/cuda:1[23]\.[\d.]+-devel-\S+",
                       r"nvidia/cuda:1[23]\.[\d.]+-runtime-\S+", res, routes_text)
    guarded(res, "deploy/Dockerfile.cpu", check_dockerfile, src, "deploy/Dockerfile.cpu",
            r"debian:(12|bookworm)\S*", r"debian:(12|bookworm)\S*", res, routes_text)
    if k8s and cuda_cmd:
        res.check("k8s --model matches the image's CMD",
                  k8s["model"] == flag_value(cuda_cmd, "--model"), f"{k8s['model']}")
    check_runtime_packages(args, src, res)

    check_kubectl(src, res)
    check_promtool(src, res)
    check_prometheus_scrape(args, res, k8s["args"] if k8s else None)
    res.finish()


if __name__ == "__main__":
    main()
