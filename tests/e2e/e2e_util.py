"""Shared helpers for the end-to-end tests that drive the `sampan` executable.

Every test is run by CTest as
    python3 FILE --sampan PATH --source-dir REPO --work-dir SCRATCH
and reports one line per check, then "N passed, M failed", exiting non-zero on any failure.
"""

import argparse
import os
import re
import subprocess
import sys

import numpy as np

# A run of `sampan` on a tiny model takes well under a second in Release; the allowance is for
# the Sanitize build and a busy 2-core machine.
RUN_TIMEOUT_S = 300


def parse_args(description):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--sampan", required=True, help="path to the sampan executable")
    ap.add_argument("--source-dir", required=True, help="repository root")
    ap.add_argument("--work-dir", required=True, help="scratch directory (created if missing)")
    args = ap.parse_args()
    args.sampan = os.path.abspath(args.sampan)
    args.source_dir = os.path.abspath(args.source_dir)
    args.work_dir = os.path.abspath(args.work_dir)
    # Not wiped as a whole (a mistyped --work-dir must not cost anyone files): each test replaces
    # only the entries it creates.
    os.makedirs(args.work_dir, exist_ok=True)
    sys.path.insert(0, os.path.join(args.source_dir, "tests", "reference"))
    return args


def models_dir(args):
    return os.path.join(args.source_dir, "tests", "data", "models")


def golden_dir(args):
    return os.path.join(args.source_dir, "tests", "data", "golden")


class Run:
    """Outcome of one sampan invocation."""

    def __init__(self, argv, returncode, stdout, stderr, timed_out=False):
        self.argv = argv
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.timed_out = timed_out

    def last_stderr_line(self):
        lines = self.stderr.rstrip("\n").split("\n")
        return lines[-1] if lines else ""

    def describe(self):
        tail = "\n".join(self.stderr.rstrip("\n").split("\n")[-5:])
        if self.timed_out:
            state = "timed out"
        elif self.returncode is not None and self.returncode < 0:
            state = f"killed by signal {-self.returncode}"
        else:
            state = f"exit {self.returncode}"
        # Long id lists would drown the message; the test case name identifies them anyway.
        shown = [a if len(a) <= 80 else a[:60] + f"...({len(a)} chars)" for a in self.argv]
        return f"`{' '.join(shown)}` -> {state}; stderr tail:\n{tail}"


def run_sampan(args, argv, timeout=RUN_TIMEOUT_S):
    cmd = [args.sampan] + list(argv)
    env = dict(os.environ)
    env.setdefault("SAMPAN_LOG_LEVEL", "warn")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout,
                           env=env)
        return Run(cmd, p.returncode, p.stdout, p.stderr)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return Run(cmd, None, out, err, timed_out=True)
    except OSError as e:
        return Run(cmd, None, "", f"cannot execute: {e}")


def require_binary(args, res):
    """Fails the whole test with one clear line when the executable is missing."""
    ok = os.path.isfile(args.sampan) and os.access(args.sampan, os.X_OK)
    if not ok:
        res.check("sampan executable", False, f"{args.sampan} does not exist or is not executable")
        res.finish()


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = []

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"PASS {name}" + (f": {detail}" if detail else ""), flush=True)
        else:
            self.failed.append(name)
            print(f"FAIL {name}" + (f": {detail}" if detail else ""), flush=True)
        return ok

    def finish(self):
        if not self.passed and not self.failed:
            # A test that checked nothing has not passed.
            self.failed.append("no checks ran")
        if self.failed:
            print("failed: " + ", ".join(self.failed))
        print(f"{self.passed} passed, {len(self.failed)} failed", flush=True)
        sys.exit(1 if self.failed else 0)


def cosine_per_row(a, b):
    # a, b: [n, vocab] -> [n], in float64 so the similarity itself adds no error.
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (a * b).sum(axis=1) / np.maximum(den, 1e-300)


def top1_agreement(a, b):
    return float((a.argmax(axis=1) == b.argmax(axis=1)).mean())


def load_logits(path, n, vocab):
    """-> (array or None, problem string). Checks the file honours the CLI contract."""
    if not os.path.exists(path):
        return None, f"{path} was not written"
    try:
        arr = np.load(path, allow_pickle=False)
    except Exception as e:  # a malformed .npy is a test failure, not a test crash
        return None, f"{path} is not a readable .npy: {e}"
    if arr.dtype != np.float32:
        return None, f"{path}: dtype {arr.dtype}, expected float32"
    if arr.shape != (n, vocab):
        return None, f"{path}: shape {arr.shape}, expected {(n, vocab)}"
    if not np.isfinite(arr).all():
        return None, f"{path}: contains non-finite values"
    return arr, ""


def sanitizer_preload(library):
    """A libsampan built with ASan must have the ASan runtime loaded first: re-executes this
    script with it preloaded (the python interpreter itself is not instrumented)."""
    if os.environ.get("SAMPAN_CAPI_REEXEC") == "1":
        return
    try:
        out = subprocess.run(["ldd", library], capture_output=True, text=True).stdout
    except OSError:
        return
    m = re.search(r"(\S*libasan\.so\S*) => (\S+)", out)
    if not m:
        return
    # libstdc++ too: ASan intercepts __cxa_throw only in libraries present at start-up.
    preload = [m.group(2)] + re.findall(r"libstdc\+\+\.so\S* => (\S+)", out)
    env = dict(os.environ, SAMPAN_CAPI_REEXEC="1", LD_PRELOAD=" ".join(preload))
    # Python's own allocations look like leaks to LeakSanitizer; the library is what is tested.
    env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS", ""), "detect_leaks=0",
                                                 "verify_asan_link_order=0"]))
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def write_peft_adapter(model_dir, out, rank, seed, b_std=0.02):
    """A LoRA adapter in peft's on-disk format (as make_lora_goldens.py saw peft write it), with
    random non-zero A and B over all seven projections of the model in `model_dir` (alpha = 2 r)
    -> {tensor name: float32 array}."""
    import json
    import numpy as np
    import safetensors_io
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    h, ffn = c["hidden_size"], c["intermediate_size"]
    hd = c.get("head_dim") or h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    shapes = {"self_attn.q_proj": (h, q), "self_attn.k_proj": (h, kv), "self_attn.v_proj": (h, kv),
              "self_attn.o_proj": (q, h), "mlp.gate_proj": (h, ffn), "mlp.up_proj": (h, ffn),
              "mlp.down_proj": (ffn, h)}
    rng = np.random.default_rng(seed)
    tensors = {}
    for layer in range(c["num_hidden_layers"]):
        for mod, (n_in, n_out) in shapes.items():
            p = f"base_model.model.model.layers.{layer}.{mod}"
            tensors[p + ".lora_A.weight"] = (rng.uniform(-1, 1, (rank, n_in)) /
                                             np.sqrt(n_in)).astype(np.float32)
            tensors[p + ".lora_B.weight"] = rng.normal(0, b_std, (n_out, rank)).astype(np.float32)
    os.makedirs(out, exist_ok=True)
    safetensors_io.save_file(tensors, os.path.join(out, "adapter_model.safetensors"))
    with open(os.path.join(out, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": 2 * rank,
                   "lora_dropout": 0.0, "bias": "none", "use_rslora": False, "use_dora": False,
                   "target_modules": [m.split(".")[1] for m in shapes],
                   "base_model_name_or_path": model_dir}, f)
    return tensors
