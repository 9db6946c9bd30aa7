#!/usr/bin/env bash
# shellcheck disable=SC2206  # option strings ("--ulimit a --ulimit b") are split on purpose
# deploy/test-image.sh: builds deploy/Dockerfile.cpu for real with podman (no Docker daemon, no
# registry needed) and checks the running image.
#
#   sudo deploy/test-image.sh [--image NAME] [--no-build] [--no-cache] [--jobs N] [--keep]
#
#   --image NAME  image to build and test (default localhost/sampan:cpu)
#   --no-build    test NAME as it is (it must exist)
#   --no-cache    build without podman's layer cache
#   --jobs N      compile jobs inside the build (SAMPAN_JOBS; default: nproc)
#   --keep        keep the work directory (demo model, logs) and print where it is
#   environment:  SAMPAN_IMAGE_HTTP_PORT / SAMPAN_IMAGE_GRPC_PORT (host ports, default 8000/8001;
#                 free ones are picked when taken), DEBIAN_MIRROR (debootstrap mirror),
#                 SAMPAN_IMAGE_CACHE (where the debootstrap tarball is kept, /var/tmp/sampan-image)
#
# Runs as root on Debian 12 (re-runs itself with sudo otherwise), from any directory of a clone.
# Steps:
#   1. installs what is missing: podman, buildah, debootstrap, runc, ... (apt) and numpy,
#      tokenizers, openai (pip);
#   2. makes the base image: Debian 12 by `debootstrap --variant=minbase bookworm`, imported as
#      localhost/debian:12 and tagged localhost/debian:12-slim too (the same minbase root file
#      system stands in for both the debian:12 and debian:12-slim of Docker Hub, which cannot be
#      reached here). Skipped when localhost/debian:12 exists. The Dockerfile's `FROM debian:12`
#      resolves to it (short names match local localhost/ images; the build runs --pull=never);
#   3. finds the podman settings that work on this machine (OCI runtime, cgroup manager, storage
#      driver, ulimits, build isolation and network, container network), trying the defaults
#      first, and prints them;
#   4. builds deploy/Dockerfile.cpu from the repository root (--format docker keeps HEALTHCHECK;
#      podman reads deploy/Dockerfile.cpu.dockerignore as BuildKit does);
#   5. makes the demo model on the host (scripts/make_demo_model.py), runs the image with it
#      mounted read-only at /models/model, ports published on 127.0.0.1 only, and checks:
#      readiness, a completion through the `openai` client, /metrics, the gRPC port, the
#      HEALTHCHECK, uid 10001, and SIGTERM (`podman stop`) during a stream: the stream ends with
#      [DONE] and the container exits 0.
# Prints PASS/FAIL per check and "N passed, M failed"; exits 1 when a check fails, 2 when the
# image cannot be built or started. Containers it started are removed on exit; images are kept.
set -euo pipefail

usage() { sed -n '3,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

IMAGE=localhost/sampan:cpu
BUILD=1
NO_CACHE=()
JOBS=""
KEEP=0
while (($#)); do
  case "$1" in
    --image) IMAGE="$2"; shift ;;
    --no-build) BUILD=0 ;;
    --no-cache) NO_CACHE=(--no-cache) ;;
    --jobs) JOBS="$2"; shift ;;
    --keep) KEEP=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "test-image: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "test-image: needs root (podman, apt-get)" >&2; exit 2; }
  exec sudo -E bash "$0" "$@"
fi

REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
BASE=localhost/debian:12
BASE_SLIM=localhost/debian:12-slim
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${SAMPAN_IMAGE_CACHE:-/var/tmp/sampan-image}
WORK=$(mktemp -d /tmp/sampan-image-test.XXXXXX)
chmod 755 "$WORK"
CONTAINERS=()
T_START=$SECONDS

say() { echo "test-image: $*"; }
die() { echo "test-image: ERROR: $*" >&2; exit 2; }

cleanup() {
  local c
  for c in "${CONTAINERS[@]}"; do
    podman "${G[@]}" rm -f -t 0 "$c" >/dev/null 2>&1 || podman "${G[@]}" rm -f "$c" >/dev/null 2>&1 || true
  done
  if ((KEEP)); then say "kept $WORK"; else rm -rf "$WORK"; fi
}
G=()
trap cleanup EXIT
trap 'exit 130' INT TERM

PASSED=0
FAILED=0
check() {  # check NAME OK(0/1) DETAIL
  if [ "$2" = 1 ]; then
    PASSED=$((PASSED + 1)); echo "PASS $1${3:+: $3}"
  else
    FAILED=$((FAILED + 1)); echo "FAIL $1${3:+: $3}"
  fi
}

# ---- 1. tools -------------------------------------------------------------------------------
APT_NEED=(podman buildah debootstrap runc crun fuse-overlayfs slirp4netns uidmap
  containernetworking-plugins curl ca-certificates python3 python3-pip)
missing=()
for p in "${APT_NEED[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >"$WORK/apt.log" 2>&1 || { tail -20 "$WORK/apt.log" >&2; die "apt-get install failed"; }
fi
pip_need=()
python3 -c "import numpy" >/dev/null 2>&1 || pip_need+=(numpy)
python3 -c "import tokenizers" >/dev/null 2>&1 || pip_need+=(tokenizers)
python3 -c "import openai" >/dev/null 2>&1 || pip_need+=(openai)
if ((${#pip_need[@]})); then
  say "pip installing ${pip_need[*]}"
  python3 -m pip install -q "${pip_need[@]}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "${pip_need[@]}"
fi
say "$(podman --version), $(buildah --version | cut -d' ' -f1-3)"

# ---- 2. base image --------------------------------------------------------------------------
T_BASE=0
make_base() {  # imports localhost/debian:12 (+ -slim) into the storage "${G[@]}" selects
  local t0=$SECONDS tarball="$CACHE/debian-12-minbase.tar"
  if ! podman "${G[@]}" image exists "$BASE"; then
    if [ ! -s "$tarball" ]; then
      say "debootstrap --variant=minbase bookworm $MIRROR (a minute or two)"
      mkdir -p "$CACHE"
      local root="$CACHE/rootfs.$$"
      rm -rf "$root"
      debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
        { tail -20 "$WORK/debootstrap.log" >&2; rm -rf "$root"; die "debootstrap failed"; }
      # The sources of Docker Hub's debian:12 (updates and security included), not debootstrap's
      # single line; no package lists or .debs left in the image.
      rm -f "$root/etc/apt/sources.list"
      cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
      rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb
      tar -C "$root" --numeric-owner -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
      rm -rf "$root"
    fi
    say "podman import $tarball as $BASE"
    podman "${G[@]}" import -q \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'CMD ["bash"]' "$tarball" "$BASE" >/dev/null
  fi
  podman "${G[@]}" image exists "$BASE_SLIM" || podman "${G[@]}" tag "$BASE" "$BASE_SLIM"
  T_BASE=$((T_BASE + SECONDS - t0))
}

# ---- 3. podman settings ---------------------------------------------------------------------
# Global options (storage driver, OCI runtime, cgroup manager) and `run` options (cgroups,
# ulimits): the first combination under which a container starts. Seen in VMs: crun refusing a
# hybrid cgroup v1/v2 host, setrlimit(RLIMIT_NOFILE/NPROC) above the VM's limits refused.
RUN_OPTS=()
BUILD_OPTS=()
ulimit_sets=(""
  "--ulimit nofile=$(ulimit -Sn):$(ulimit -Hn) --ulimit nproc=$(ulimit -Su):$(ulimit -Hu)"
  "--ulimit nofile=$(ulimit -Sn):$(ulimit -Hn) --ulimit nproc=32768:32768"
  "--ulimit nofile=1024:4096 --ulimit nproc=4096:4096")
find_run_settings() {
  local storage runtime cg ul
  for storage in "" "--storage-driver vfs"; do
    G=($storage)
    make_base
    for runtime in "" "--runtime runc" "--runtime crun"; do
      for cg in "" "--cgroup-manager cgroupfs" "--cgroups=disabled"; do
        for ul in "${ulimit_sets[@]}"; do
          local g=($storage $runtime) r=($ul)
          case "$cg" in --cgroup-manager*) g+=($cg) ;; ?*) r+=($cg) ;; esac
          if timeout 120 podman "${g[@]}" run --rm "${r[@]}" "$BASE" true >"$WORK/probe.log" 2>&1
          then
            G=("${g[@]}"); RUN_OPTS=("${r[@]}")
            return 0
          fi
          echo "  tried podman ${g[*]} run ${r[*]}: $(tail -1 "$WORK/probe.log")" >>"$WORK/probes.log"
        done
      done
    done
  done
  return 1
}
if ! find_run_settings; then
  cat "$WORK/probes.log" >&2
  die "no podman settings start a container here"
fi
say "podman global options: ${G[*]:-(defaults)}"
say "podman run options:    ${RUN_OPTS[*]:-(defaults)}"

# Build: the run ulimits, then isolation and network choices, tried on a RUN that needs the
# Debian mirror (the real build's first RUN does apt-get).
find_build_settings() {
  local iso net ul=()
  printf 'FROM %s\nRUN apt-get update -qq && echo probe-ok\n' "$BASE" >"$WORK/Containerfile.probe"
  for x in "${RUN_OPTS[@]}"; do case "$x" in --cgroups=*) ;; *) ul+=("$x") ;; esac; done
  for iso in "" "--isolation chroot"; do
    for net in "" "--network host"; do
      local b=("${ul[@]}" $iso $net)
      if timeout 300 podman "${G[@]}" build --pull=never --no-cache --layers=false "${b[@]}" \
           -f "$WORK/Containerfile.probe" -t localhost/sampan-probe:latest "$WORK" \
           >"$WORK/probe.log" 2>&1 && grep -q probe-ok "$WORK/probe.log"; then
        podman "${G[@]}" rmi -f localhost/sampan-probe:latest >/dev/null 2>&1 || true
        BUILD_OPTS=("${b[@]}")
        return 0
      fi
      echo "  tried podman build ${b[*]}: $(tail -1 "$WORK/probe.log")" >>"$WORK/probes.log"
    done
  done
  return 1
}

# ---- 4. build -------------------------------------------------------------------------------
T_BUILD=0
if ((BUILD)); then
  if ! find_build_settings; then
    cat "$WORK/probes.log" >&2
    die "no podman build settings reach the Debian mirror from a RUN step"
  fi
  say "podman build options:  ${BUILD_OPTS[*]:-(defaults)}"
  say "building $IMAGE from deploy/Dockerfile.cpu (compiles Sampan: several minutes)"
  t0=$SECONDS
  BUILD_LOG="$WORK/build.log"
  if ! podman "${G[@]}" build --pull=never --format docker "${BUILD_OPTS[@]}" "${NO_CACHE[@]}" \
       --build-arg SAMPAN_JOBS="${JOBS:-$(nproc)}" -f deploy/Dockerfile.cpu -t "$IMAGE" . \
       >"$BUILD_LOG" 2>&1; then
    grep -v 'Reading database' "$BUILD_LOG" | tail -40 >&2
    die "podman build failed (log above)"
  fi
  T_BUILD=$((SECONDS - t0))
  # The build stage prints deploy/runtime_packages.sh's list just before the runtime stage.
  say "built in ${T_BUILD} s; runtime packages: $(sed -n '/^\[2\/2\] STEP 1\//q;p' "$BUILD_LOG" |
    grep -E '^[a-z0-9][a-z0-9.+:-]*$' | tr '\n' ' ' || true)"
else
  podman "${G[@]}" image exists "$IMAGE" || die "--no-build: no image $IMAGE"
fi
SIZE=$(podman "${G[@]}" image inspect --format '{{.Size}}' "$IMAGE")
say "image $IMAGE: $((SIZE / 1000000)) MB"

# ---- 5. run and check -----------------------------------------------------------------------
T_CHECKS0=$SECONDS
say "making the demo model"
MODEL="$WORK/model"
python3 scripts/make_demo_model.py --tokenizer-dir tests/data/tokenizers/llama-spm \
  --out "$MODEL" >"$WORK/model.log" 2>&1 || { tail -20 "$WORK/model.log" >&2; die "demo model failed"; }
chmod -R a+rX "$MODEL"  # the container reads it as uid 10001

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pick_port() {  # pick_port PREFERRED -> PREFERRED when free, else a free one
  if port_free "$1"; then echo "$1"; return; fi
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
HTTP_PORT=$(pick_port "${SAMPAN_IMAGE_HTTP_PORT:-8000}")
GRPC_PORT=$(pick_port "${SAMPAN_IMAGE_GRPC_PORT:-8001}")
while [ "$GRPC_PORT" = "$HTTP_PORT" ]; do GRPC_PORT=$(pick_port 0); done
URL="http://127.0.0.1:$HTTP_PORT"
# The image's own CMD, --shutdown-grace read from it (the stop timeout must exceed it).
CMD_JSON=$(podman "${G[@]}" image inspect --format '{{json .Config.Cmd}}' "$IMAGE")
GRACE=$(python3 -c 'import json,sys; a=json.loads(sys.argv[1]); print(a[a.index("--shutdown-grace")+1] if "--shutdown-grace" in a else 30)' "$CMD_JSON")
STOP_TIMEOUT=$(python3 -c "import math; print(math.ceil(float('$GRACE')) + 15)")

http_status() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$1" || true; }

# Starts the image on the first container network that publishes the HTTP port to the host:
# the default (bridge), then slirp4netns, then the host network (ports then given by flags).
C=""
start_container() {
  local net name args st inside i
  for net in "" slirp4netns host; do
    name="sampan-image-test-$$-${net:-bridge}"
    args=(--name "$name" -d "${RUN_OPTS[@]}" -v "$MODEL:/models/model:ro")
    local cmd=()
    if [ "$net" = host ]; then
      # No port publishing on the host network: the server binds 127.0.0.1 on the host ports.
      args+=(--network host)
      mapfile -t cmd < <(python3 -c 'import json,sys
a = json.loads(sys.argv[1]); over = {"--host": "127.0.0.1", "--http-port": sys.argv[2], "--grpc-port": sys.argv[3]}
for k, v in over.items():
    if k in a: a[a.index(k) + 1] = v
    else: a += [k, v]
print("\n".join(a))' "$CMD_JSON" "$HTTP_PORT" "$GRPC_PORT")
    else
      [ -z "$net" ] || args+=(--network "$net")
      args+=(-p "127.0.0.1:$HTTP_PORT:8000" -p "127.0.0.1:$GRPC_PORT:8001")
    fi
    CONTAINERS+=("$name")
    if ! podman "${G[@]}" run "${args[@]}" "$IMAGE" "${cmd[@]}" >"$WORK/run.log" 2>&1; then
      say "network ${net:-bridge}: $(tail -1 "$WORK/run.log")"
      podman "${G[@]}" rm -f "$name" >/dev/null 2>&1 || true
      continue
    fi
    # Ready from the host within 180 s; when it is ready inside but not from the host, the port
    # publishing is what fails: next network.
    for ((i = 0; i < 180; i++)); do
      st=$(http_status "$URL/v2/health/ready")
      [ "$st" = 200 ] && { C=$name; NET=${net:-bridge}; return 0; }
      if [ "$(podman "${G[@]}" inspect --format '{{.State.Running}}' "$name" 2>/dev/null)" != true ]; then
        say "network ${net:-bridge}: the container exited; its log:"
        podman "${G[@]}" logs "$name" 2>&1 | tail -20
        return 1  # not a network problem
      fi
      if ((i >= 20)); then
        inside=$(podman "${G[@]}" exec "$name" curl -s -o /dev/null -w '%{http_code}' \
                   http://127.0.0.1:8000/v2/health/ready 2>/dev/null || true)
        if [ "$inside" = 200 ]; then
          say "network ${net:-bridge}: ready inside, not on 127.0.0.1:$HTTP_PORT: next network"
          podman "${G[@]}" rm -f "$name" >/dev/null 2>&1 || true
          continue 2
        fi
      fi
      sleep 1
    done
    say "network ${net:-bridge}: not ready after 180 s; its log:"
    podman "${G[@]}" logs "$name" 2>&1 | tail -20
    return 1
  done
  return 1
}

t0=$SECONDS
NET=""
if start_container; then
  check "ready: GET /v2/health/ready answers 200" 1 "after $((SECONDS - t0)) s"
else
  check "ready: GET /v2/health/ready answers 200" 0 "the container never became ready"
fi
say "container network: $NET; HTTP 127.0.0.1:$HTTP_PORT, gRPC 127.0.0.1:$GRPC_PORT"

if [ -n "$C" ]; then
  # Published on 127.0.0.1 only.
  ports=$(podman "${G[@]}" port "$C" 2>/dev/null | tr '\n' ' ' || true)
  if [ "$NET" = host ]; then
    check "ports bound to 127.0.0.1 only" 1 "host network, server --host 127.0.0.1"
  else
    bad=$(podman "${G[@]}" port "$C" 2>/dev/null | grep -v -- '-> 127\.0\.0\.1:' || true)
    check "ports published on 127.0.0.1 only" "$([ -n "$ports" ] && [ -z "$bad" ] && echo 1 || echo 0)" "$ports"
  fi

  out=$(python3 - "$URL" <<'EOF' 2>&1
import sys
from openai import OpenAI
client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused", timeout=60, max_retries=0)
model = client.models.list().data[0].id
r = client.completions.create(model=model, prompt="The meaning of life is", max_tokens=16,
                              temperature=0)
text = r.choices[0].text
print(f"model {model!r}, {r.usage.completion_tokens} tokens, finish {r.choices[0].finish_reason}: {text!r}")
sys.exit(0 if text.strip() and r.usage.completion_tokens > 0 else 1)
EOF
  ) && ok=1 || ok=0
  check "completion through the openai client returns text" "$ok" "$(tail -1 <<<"$out")"

  m=$(curl -s --max-time 10 "$URL/metrics" || true)
  n=$(grep -c '^sampan:' <<<"$m" || true)
  check "/metrics has sampan: metrics" "$([ "${n:-0}" -gt 0 ] && echo 1 || echo 0)" \
    "$n samples, e.g. $(grep -m1 '^sampan:requests_total' <<<"$m" || grep -m1 '^sampan:' <<<"$m" || true)"

  if (exec 3<>"/dev/tcp/127.0.0.1/$GRPC_PORT") 2>/dev/null; then ok=1; else ok=0; fi
  check "gRPC port accepts connections" "$ok" "127.0.0.1:$GRPC_PORT"

  hc=$(podman "${G[@]}" healthcheck run "$C" 2>&1) && ok=1 || ok=0
  check "image HEALTHCHECK passes (podman healthcheck run)" "$ok" "${hc:-healthy}"

  uid=$(podman "${G[@]}" exec "$C" id -u 2>&1 || true)
  pid1=$(podman "${G[@]}" exec "$C" sh -c 'tr "\0" " " </proc/1/cmdline; grep -E "^(Uid|Gid):" /proc/1/status | tr -s "\t " " "' 2>&1 | tr '\n' ';' || true)
  top=$(podman "${G[@]}" top "$C" user huser args 2>/dev/null | tail -n +2 | tr -s ' ' | tr '\n' ';' || true)
  ok=0
  [ "$uid" = 10001 ] && grep -q 'Uid: 10001 10001 10001 10001' <<<"$pid1" && ok=1
  check "the server runs as uid 10001" "$ok" "exec id -u: $uid; pid 1: $pid1 top: $top"

  # SIGTERM while a stream is in flight: the streamer starts `podman stop -t` once two events
  # have arrived and reads the rest; the stream must end with [DONE] after all its tokens.
  out=$(python3 - "$HTTP_PORT" "$C" "$STOP_TIMEOUT" "${G[@]}" <<'EOF' 2>&1
import http.client, json, subprocess, sys, time
port, name, stop_t, g = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
n = 1500
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
models = json.loads((conn.request("GET", "/v1/models"), conn.getresponse().read())[1])
body = {"model": models["data"][0]["id"], "prompt": "Once upon a time", "max_tokens": n,
        "temperature": 0, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True}}
conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
r = conn.getresponse()
assert r.status == 200, r.status
events, stop, before, t0 = [], None, 0, time.monotonic()
while True:
    line = r.readline()
    if not line:
        break
    line = line.decode().strip()
    if not line.startswith("data:"):
        continue
    p = line[5:].strip()
    events.append(p if p == "[DONE]" else json.loads(p))
    if stop is None and len(events) >= 2:
        before = len(events)
        stop = subprocess.Popen(["podman", *g, "stop", "-t", stop_t, name],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        t0 = time.monotonic()
    if p == "[DONE]":
        break
rc = stop.wait(timeout=int(stop_t) + 30) if stop else None
dt = time.monotonic() - t0
usage = next((e["usage"] for e in reversed(events) if isinstance(e, dict) and e.get("usage")), {})
finish = next((c.get("finish_reason") for e in reversed(events) if isinstance(e, dict)
               for c in e.get("choices") or [] if c.get("finish_reason")), None)
ok = (events and events[-1] == "[DONE]" and finish == "length" and
      usage.get("completion_tokens") == n and rc == 0)
print(f"podman stop sent after event {before}; {len(events)} events, last {events[-1] if events else None!r}, "
      f"finish {finish}, completion_tokens {usage.get('completion_tokens')}/{n}; "
      f"podman stop rc {rc} after {dt:.1f} s")
sys.exit(0 if ok else 1)
EOF
  ) && ok=1 || ok=0
  check "SIGTERM during a stream: the stream completes with [DONE]" "$ok" "$(tail -1 <<<"$out")"
  for ((i = 0; i < 60; i++)); do
    [ "$(podman "${G[@]}" inspect --format '{{.State.Running}}' "$C")" = true ] || break
    sleep 1
  done
  code=$(podman "${G[@]}" inspect --format '{{.State.ExitCode}}' "$C" 2>&1 || true)
  drain=$(podman "${G[@]}" logs "$C" 2>&1 | grep -m1 -i 'draining' | sed 's/^ *//' || true)
  check "the container exits 0 after SIGTERM (podman stop -t $STOP_TIMEOUT, --shutdown-grace $GRACE)" \
    "$([ "$code" = 0 ] && echo 1 || echo 0)" "exit code $code; log: ${drain:-no drain line}"
fi
T_CHECKS=$((SECONDS - T_CHECKS0))

echo
say "settings: podman ${G[*]:-(defaults)}; run ${RUN_OPTS[*]:-(defaults)};" \
  "build ${BUILD_OPTS[*]:-(not built)}; network ${NET:-none}"
say "timings: base image ${T_BASE} s, build ${T_BUILD} s, checks ${T_CHECKS} s, total $((SECONDS - T_START)) s"
say "image $IMAGE: $((SIZE / 1000000)) MB"
echo "$PASSED passed, $FAILED failed"
((FAILED == 0))
