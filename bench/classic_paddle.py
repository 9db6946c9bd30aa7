"""The paddle.inference side of bench/bench_classic.py: the same two workloads written in paddle.nn,
saved by paddle.jit.save (PIR `inference.json` + `inference.pdiparams`, what paddlepaddle 3.x
writes), timed with paddle.inference's predictor, and handed to Sampan as the same files.

  resnet50   paddle.vision.models.resnet50() (random initialisation), images [batch, 3, 224, 224]
  bert_base  a BERT-base encoder in paddle.nn (12 layers, hidden 768, 12 heads, ff 3072, vocab
             30522, erf GELU, post-LayerNorm; tests/reference/make_paddle_models.py's encoder
             layer at BERT-base size), ids [batch, 128]

The predictor is configured as Paddle Inference's CPU guide says (IR optimisation on, the
thread count given, oneDNN on or off with --paddle-onednn). This module needs paddlepaddle; the
benchmark imports it only when asked for the paddle column.
"""

import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))


def make_paddle_models(cache):
    """Writes <cache>/paddle_resnet50 and <cache>/paddle_bert_base once; returns both directories."""
    r50 = os.path.join(cache, "paddle_resnet50")
    bert = os.path.join(cache, "paddle_bert_base")
    if os.path.exists(os.path.join(r50, "inference.json")) and os.path.exists(os.path.join(bert, "inference.json")):
        return r50, bert
    import paddle
    import paddle.nn as nn
    from paddle.vision.models import resnet50

    import make_paddle_models as mk

    paddle.seed(0)
    if not os.path.exists(os.path.join(r50, "inference.json")):
        net = resnet50()
        net.eval()
        paddle.jit.save(net, os.path.join(r50, "inference"),
                        input_spec=[paddle.static.InputSpec([None, 3, 224, 224], "float32", "images")])

    class BertBase(mk.BertTiny):
        def __init__(self):
            super().__init__(vocab=30522, d=768, heads=12, ff=3072, max_pos=512)
            self.layers = nn.LayerList([mk.EncoderLayer(768, 12, 3072) for _ in range(12)])

    if not os.path.exists(os.path.join(bert, "inference.json")):
        net = BertBase()
        net.eval()
        spec = [paddle.static.InputSpec([None, None], "int64", n)
                for n in ("input_ids", "token_type_ids", "attention_mask")]
        paddle.jit.save(net, os.path.join(bert, "inference"), input_spec=spec)
    return r50, bert


class PaddlePredictor:
    """One paddle.inference predictor on the CPU over a saved model directory."""

    def __init__(self, model_dir, threads, onednn):
        from paddle import inference

        config = inference.Config(os.path.join(model_dir, "inference.json"),
                                  os.path.join(model_dir, "inference.pdiparams"))
        config.disable_gpu()
        config.set_cpu_math_library_num_threads(threads)
        if onednn:
            config.enable_mkldnn()
        else:
            config.disable_mkldnn()
        config.switch_ir_optim(True)
        config.disable_glog_info()
        self.predictor = inference.create_predictor(config)

    def run(self, inputs, runs):
        """Median milliseconds of `runs` runs after one warm-up; inputs by name."""
        p = self.predictor
        for name in p.get_input_names():
            h = p.get_input_handle(name)
            h.reshape(inputs[name].shape)
            h.copy_from_cpu(inputs[name])
        p.run()
        ms = []
        for _ in range(runs):
            t0 = time.perf_counter()
            p.run()
            ms.append((time.perf_counter() - t0) * 1e3)
        return float(np.median(ms))

    def outputs(self):
        p = self.predictor
        return [p.get_output_handle(n).copy_to_cpu() for n in p.get_output_names()]


def run_table(run_sampan, configs, cache, threads, runs, rounds, only=""):
    """The paddle table: for each (name, _, batch, inputs) of `configs`, Sampan on the paddle files
    (run_sampan(model_dir, inputs) -> median ms) against paddle.inference, both predictor
    configurations (oneDNN on and off) timed and the faster one reported, alternating in every
    round like the onnxruntime table."""
    import paddle

    r50, bert = make_paddle_models(cache)
    dirs = {"resnet50": r50, "bert_base": bert}
    print(f"\npaddle files (PIR json + pdiparams, paddle.jit.save); paddlepaddle {paddle.__version__}, "
          f"its faster CPU configuration of oneDNN on / off")
    print(f"{'model':<10} {'batch':>5} {'sampan ms':>10} {'paddle ms':>10} {'paddle cfg':>10} "
          f"{'sampan/paddle throughput':>25}")
    for name, _, b, inputs in configs:
        if only and name != only:
            continue
        preds = {on: PaddlePredictor(dirs[name], threads, on) for on in (True, False)}
        best = {True: float("inf"), False: float("inf")}
        s_best = float("inf")
        for _ in range(rounds):
            s_best = min(s_best, run_sampan(dirs[name], inputs))
            for on, p in preds.items():
                best[on] = min(best[on], p.run(inputs, runs))
        p_best = min(best.values())
        cfg = "oneDNN" if best[True] <= best[False] else "native"
        print(f"{name:<10} {b:>5} {s_best:>10.2f} {p_best:>10.2f} {cfg:>10} {p_best / s_best:>24.2f}x", flush=True)
