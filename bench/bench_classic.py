"""Classic models: Sampan (`sampan infer --repeat`) against onnxruntime on the same ONNX file,
same inputs, same threads, in one run.

    /work/refenv/bin/python bench/bench_classic.py --sampan build/sampan [--threads 2] [--runs 20]

Models (random weights, made once into --cache by torch, which this needs the first time; the
ONNX export is the same as tests/reference/make_classic_models.py's):
  resnet50   the ResNet-50 shape (bottlenecks [3, 4, 6, 3], widths 256..2048), 224x224, batch 1 and 8
  bert_base  transformers' BertModel(BertConfig()) (12 layers, hidden 768), sequence 128, batch 1 and 8

Each configuration runs `rounds` times alternating the two engines (noise on a shared machine
hits both alike); each engine's figure is its best round's median latency over --runs runs. The
table prints both latencies and the throughput ratio Sampan / onnxruntime (> 1: Sampan faster).

A second table (bench/classic_paddle.py; when paddlepaddle is installed, or --paddle on) runs the
same two workloads written in paddle.nn and saved by paddle.jit.save: Sampan on those Paddle files
against paddle.inference's predictor (oneDNN on and off, the faster reported), same rounds.

--precision bf16 times `sampan infer --precision bf16` instead; --precision both times f32 and
bf16 interleaved with onnxruntime (f32, bf16, ort in every round) and adds the bf16 columns: its
latency, the speed-up bf16 / f32, and bf16's error against Sampan f32 on the first output
(cosine and max |bf16 - f32| / max |f32|).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
sys.path.insert(0, HERE)


def make_models(cache):
    import torch
    from torch import nn
    import make_classic_models as mk

    os.makedirs(cache, exist_ok=True)
    r50 = os.path.join(cache, "resnet50.onnx")
    if not os.path.exists(r50):
        class ResNet50(nn.Module):
            def __init__(self):
                super().__init__()
                self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                          nn.MaxPool2d(3, 2, 1))
                blocks, cin = [], 64
                for mid, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                    for i in range(n):
                        blocks.append(mk.Bottleneck(cin, mid, mid * 4, stride if i == 0 else 1))
                        cin = mid * 4
                self.layers = nn.Sequential(*blocks)
                self.fc = nn.Linear(2048, 1000)

            def forward(self, x):
                y = self.layers(self.stem(x))
                return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))

        net = ResNet50().eval()
        torch.onnx.export(net, (torch.zeros(1, 3, 224, 224),), r50, input_names=["images"], output_names=["logits"],
                          dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17, dynamo=False)
    bert = os.path.join(cache, "bert_base.onnx")
    if not os.path.exists(bert):
        from transformers import BertConfig, BertModel

        class Wrapped(nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask, token_type_ids):
                o = self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
                return o.last_hidden_state, o.pooler_output

        m = Wrapped(BertModel(BertConfig(attn_implementation="eager")).eval()).eval()
        ids = torch.zeros(1, 128, dtype=torch.long)
        names = ["input_ids", "attention_mask", "token_type_ids"]
        dyn = {n: {0: "batch", 1: "sequence"} for n in names}
        torch.onnx.export(m, (ids, torch.ones_like(ids), ids), bert, input_names=names,
                          output_names=["last_hidden_state", "pooler_output"], dynamic_axes=dyn, opset_version=17,
                          dynamo=False)
    return r50, bert


def run_sampan(sampan, model, inputs, threads, runs, work, precision="f32"):
    argv = [sampan, "infer", "--model", model, "--output-dir", os.path.join(work, "out_" + precision), "--threads",
            str(threads), "--repeat", str(runs), "--precision", precision]
    for n, a in inputs.items():
        p = os.path.join(work, n + ".npy")
        np.save(p, a)
        argv += ["--input", f"{n}={p}"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return float(re.search(r"median ([0-9.]+) ms", out).group(1))


def run_ort(sess, inputs, runs):
    sess.run(None, inputs)  # warm-up
    ms = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, inputs)
        ms.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(ms))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sampan", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "sampan-classic-bench"))
    ap.add_argument("--only", default="", help="resnet50 or bert_base")
    ap.add_argument("--paddle", choices=["auto", "on", "off"], default="auto",
                    help="the paddle.inference table (auto: when paddlepaddle is installed)")
    ap.add_argument("--precision", choices=["f32", "bf16", "both"], default="f32",
                    help="Sampan's precision; both: f32 and bf16 columns")
    args = ap.parse_args()
    import onnxruntime as ort

    r50, bert = make_models(args.cache)
    rng = np.random.default_rng(0)
    configs = []
    for b in (1, 8):
        configs.append(("resnet50", r50, b, {"images": rng.standard_normal((b, 3, 224, 224)).astype(np.float32)}))
    for b in (1, 8):
        ids = rng.integers(0, 30000, (b, 128)).astype(np.int64)
        configs.append(("bert_base", bert, b, {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                               "token_type_ids": np.zeros_like(ids)}))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    print(f"threads {args.threads}, {args.runs} runs per round, best of {args.rounds} rounds; onnxruntime {ort.__version__}")
    both = args.precision == "both"
    first = "f32" if both else args.precision
    head = f"{'model':<10} {'batch':>5} {'sampan ms':>10} {'ort ms':>10} {'sampan/ort throughput':>22}"
    if both:
        head += f" {'bf16 ms':>9} {'bf16/f32':>8} {'bf16/ort':>8} {'bf16 cos':>10} {'bf16 rel':>9}"
    print(head)
    with tempfile.TemporaryDirectory() as work:
        for name, path, b, inputs in configs:
            if args.only and name != args.only:
                continue
            sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
            s_best, o_best, h_best = float("inf"), float("inf"), float("inf")
            for _ in range(args.rounds):
                s_best = min(s_best, run_sampan(args.sampan, path, inputs, args.threads, args.runs, work, first))
                if both:
                    h_best = min(h_best, run_sampan(args.sampan, path, inputs, args.threads, args.runs, work, "bf16"))
                o_best = min(o_best, run_ort(sess, inputs, args.runs))
            line = f"{name:<10} {b:>5} {s_best:>10.2f} {o_best:>10.2f} {o_best / s_best:>21.2f}x"
            if both:
                out = sess.get_outputs()[0].name
                f = np.load(os.path.join(work, "out_f32", out + ".npy")).astype(np.float64).ravel()
                h = np.load(os.path.join(work, "out_bf16", out + ".npy")).astype(np.float64).ravel()
                cos = float(f @ h / max(np.linalg.norm(f) * np.linalg.norm(h), 1e-300))
                rel = float(np.max(np.abs(h - f)) / max(np.max(np.abs(f)), 1e-30))
                line += (f" {h_best:>9.2f} {s_best / h_best:>7.2f}x {o_best / h_best:>7.2f}x {cos:>10.7f}"
                         f" {rel:>9.2e}")
            print(line, flush=True)
        if args.paddle != "off":
            try:
                import paddle  # noqa: F401
            except ImportError:
                if args.paddle == "on":
                    raise
                print("\npaddle.inference: paddlepaddle is not installed here, no paddle table")
                return
            import classic_paddle
            classic_paddle.run_table(
                lambda d, inputs: run_sampan(args.sampan, d, inputs, args.threads, args.runs, work, first),
                configs, args.cache, args.threads, args.runs, args.rounds, args.only)


if __name__ == "__main__":
    main()
