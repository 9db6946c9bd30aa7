"""Makes the classic-model fixtures (run once, commit): small ResNet- and BERT-style models with
random weights, exported to ONNX by torch, with inputs and reference outputs computed by torch.

    /work/refenv/bin/python tests/reference/make_classic_models.py

Needs torch, onnx, onnxscript, onnxruntime and transformers (see requirements-golden.txt);
CI reads the committed files in tests/data/classic and runs onnxruntime on them live. For each
model it writes

    tests/data/classic/<model>.onnx
    tests/data/classic/<model>.<k>.<input>.npy     inputs of case k (two batch/sequence shapes)
    tests/data/classic/<model>.<k>.<output>.npy    torch's outputs for them, float32
    tests/data/classic/manifest.json               models, cases, input and output names

Models:
  resnet_tiny     a ResNet-50-shaped CNN (7x7/2 stem, max pool, bottleneck blocks with
                  stride-2 downsampling and projection shortcuts, global average pool, fc),
                  batch norm folded into the convs by the exporter
  resnet_tiny_bn  the same network exported without constant folding: BatchNormalization
                  nodes stay in the file
  cnn_ops         a small CNN covering the rest of the CNN ops: depthwise and grouped convs,
                  dilation, asymmetric padding, average pooling (ceil mode, pads), HardSwish,
                  HardSigmoid, Sigmoid, Clip (ReLU6), Concat, Flatten, Gemm
  bert_tiny       transformers' BertModel (2 layers, hidden 64, 4 heads, vocabulary 512) with
                  dynamic batch and sequence axes: input_ids, attention_mask, token_type_ids
                  -> last_hidden_state, pooler_output

The exporter is torch.onnx.export with dynamo=False (the TorchScript exporter), opset 17: it
writes the Shape/Gather/Unsqueeze/Concat chains and the erf-form GELU that deployed BERT files
have.
"""

import json
import os
import sys

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "classic")
OPSET = 17


class Bottleneck(nn.Module):
    def __init__(self, cin, mid, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, mid, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        s = x if self.down is None else self.down(x)
        return self.relu(y + s)


class ResNetTiny(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1))
        self.layers = nn.Sequential(Bottleneck(16, 8, 32, 1), Bottleneck(32, 8, 32, 1),
                                    Bottleneck(32, 16, 64, 2), Bottleneck(64, 32, 128, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(128, classes)

    def forward(self, x):
        y = self.layers(self.stem(x))
        return self.fc(torch.flatten(self.pool(y), 1))


class CnnOps(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 12, 3, stride=1, padding=0, bias=True)
        self.dw = nn.Conv2d(12, 12, 3, stride=2, padding=1, groups=12)
        self.g2 = nn.Conv2d(12, 8, 3, padding=2, dilation=2, groups=2)
        self.pw = nn.Conv2d(20, 16, 1)
        self.pool = nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
        self.fc = nn.Linear(16 * 8 * 8, 7)

    def forward(self, x):
        x = nn.functional.pad(x, (1, 0, 2, 1))  # asymmetric padding, folded into the conv's pads or a Pad
        y = nn.functional.hardswish(self.c1(x))
        a = torch.clamp(self.dw(y), 0.0, 6.0)
        b = torch.sigmoid(self.g2(a)) * nn.functional.hardsigmoid(a[:, :8])
        z = torch.relu(self.pw(torch.cat([a, b], dim=1)))
        z = self.pool(z)
        return torch.tanh(self.fc(torch.flatten(z, 1)))


def randomize_bn(model, gen):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) * 0.5 + 0.75)
                m.weight.copy_(torch.rand(m.num_features, generator=gen) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(m.num_features, generator=gen) * 0.1)


def export(model, name, args, input_names, output_names, dynamic_axes, fold=True):
    path = os.path.join(OUT, name + ".onnx")
    torch.onnx.export(model, args, path, input_names=input_names, output_names=output_names,
                      dynamic_axes=dynamic_axes, opset_version=OPSET, do_constant_folding=fold,
                      dynamo=False)
    return path


def save_case(name, k, inputs, outputs):
    for n, a in inputs.items():
        np.save(os.path.join(OUT, f"{name}.{k}.{n}.npy"), a)
    for n, a in outputs.items():
        np.save(os.path.join(OUT, f"{name}.{k}.{n}.npy"), a.astype(np.float32))


def check_ort(path, inputs, outputs, tol=1e-4):
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = sess.run(list(outputs), inputs)
    for (n, want), g in zip(outputs.items(), got):
        err = np.max(np.abs(g - want)) / (np.max(np.abs(want)) + 1e-12)
        assert err < tol, (path, n, err)


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    manifest = {}

    # --- ResNet-style CNN, twice (folded and with BatchNormalization nodes) ---
    net = ResNetTiny().eval()
    randomize_bn(net, gen)
    images = [np.random.default_rng(2).standard_normal((1, 3, 64, 64)).astype(np.float32),
              np.random.default_rng(3).standard_normal((3, 3, 48, 56)).astype(np.float32)]
    for name, fold in (("resnet_tiny", True), ("resnet_tiny_bn", False)):
        path = export(net, name, (torch.from_numpy(images[0]),), ["images"], ["logits"],
                      {"images": {0: "batch", 2: "height", 3: "width"}, "logits": {0: "batch"}}, fold)
        cases = []
        for k, img in enumerate(images):
            with torch.no_grad():
                out = {"logits": net(torch.from_numpy(img)).numpy()}
            ins = {"images": img}
            check_ort(path, ins, out)
            save_case(name, k, ins, out)
            cases.append(k)
        manifest[name] = {"inputs": ["images"], "outputs": ["logits"], "cases": cases}

    # --- the other CNN ops ---
    ops = CnnOps().eval()
    imgs = [np.random.default_rng(4).standard_normal((2, 3, 29, 31)).astype(np.float32)]
    path = export(ops, "cnn_ops", (torch.from_numpy(imgs[0]),), ["x"], ["y"], {"x": {0: "batch"}, "y": {0: "batch"}})
    with torch.no_grad():
        out = {"y": ops(torch.from_numpy(imgs[0])).numpy()}
    check_ort(path, {"x": imgs[0]}, out)
    save_case("cnn_ops", 0, {"x": imgs[0]}, out)
    manifest["cnn_ops"] = {"inputs": ["x"], "outputs": ["y"], "cases": [0]}

    # --- BERT-style encoder (transformers' BertModel) ---
    from transformers import BertConfig, BertModel
    cfg = BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=128, type_vocab_size=2,
                     hidden_act="gelu", attn_implementation="eager")
    bert = BertModel(cfg).eval()
    rng = np.random.default_rng(5)
    cases_in = []
    for b, s in ((1, 16), (3, 37)):
        ids = rng.integers(0, 512, (b, s)).astype(np.int64)
        mask = np.ones((b, s), np.int64)
        if b > 1:
            mask[1, s - 9:] = 0  # a padded row
            mask[2, s - 20:] = 0
        types = np.zeros((b, s), np.int64)
        types[:, s // 2:] = 1
        cases_in.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
    names = ["input_ids", "attention_mask", "token_type_ids"]
    args = tuple(torch.from_numpy(cases_in[0][n]) for n in names)
    dyn = {n: {0: "batch", 1: "sequence"} for n in names}
    dyn["last_hidden_state"] = {0: "batch", 1: "sequence"}
    dyn["pooler_output"] = {0: "batch"}
    class Wrapped(nn.Module):  # keyword arguments: BertModel's positional order varies
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            o = self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return o.last_hidden_state, o.pooler_output

    path = export(Wrapped(bert).eval(), "bert_tiny", args, names, ["last_hidden_state", "pooler_output"], dyn)
    cases = []
    for k, ins in enumerate(cases_in):
        with torch.no_grad():
            o = bert(**{n: torch.from_numpy(v) for n, v in ins.items()})
        out = {"last_hidden_state": o.last_hidden_state.numpy(), "pooler_output": o.pooler_output.numpy()}
        check_ort(path, ins, out)
        save_case("bert_tiny", k, ins, out)
        cases.append(k)
    manifest["bert_tiny"] = {"inputs": names, "outputs": ["last_hidden_state", "pooler_output"], "cases": cases}

    manifest["_made_with"] = {"torch": torch.__version__, "opset": OPSET}
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    print("wrote", OUT)


if __name__ == "__main__":
    sys.exit(main())
