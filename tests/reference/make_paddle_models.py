"""Makes the Paddle fixtures in tests/data/classic_paddle (run once with paddlepaddle 3.x).

    /work/refenv/bin/python tests/reference/make_paddle_models.py [OUT_DIR]

Three small models (a ResNet-style CNN, a BERT-style encoder, and split_tiny for paddle.split's
two forms) written in paddle.nn with random weights, saved by paddle.jit.save with dynamic
batch (and sequence) dimensions, in both program forms paddle 3.x writes:
  <model>/pir/inference.json + inference.pdiparams       (PIR, the 3.x default)
  <model>/legacy/inference.pdmodel + inference.pdiparams (ProgramDesc, FLAGS_enable_pir_api=0)
The legacy form needs a fresh interpreter (the flag is read at import), so this script re-runs
itself with `--legacy` (the default; `--no-legacy` skips it). paddle 3.3.1 cannot write it through
paddle.jit.save for these models (dy2static in legacy mode fails on sigmoid and matmul: "argument
must be Value, but got Variable"), so the legacy models are built again in static mode
(paddle.static: conv2d/batch_norm/fc layers, ops appended with LayerHelper where the 3.x python
API insists on PIR values) with the same structure, their own random weights, and saved by
paddle.static.save_inference_model. Inputs (shared by both forms) and reference outputs are
computed by paddle on the saved models (paddle.jit.load; paddle.static.load_inference_model and
Executor.run for the legacy form) and written as <model>.<case>.<name>.npy (legacy:
<model>.<case>.<name>.legacy.npy); manifest.json lists the models, their cases, inputs, outputs,
and per form the program file, the output names the program gives and the reference suffix.
"""

import json
import os
import subprocess
import sys

if "--legacy" in sys.argv:
    os.environ["FLAGS_enable_pir_api"] = "0"

import numpy as np  # noqa: E402
import paddle  # noqa: E402
import paddle.nn as nn  # noqa: E402
import paddle.nn.functional as F  # noqa: E402


def randomize(layer, seed):
    """Random weights everywhere, batch-norm statistics included (so that their order matters)."""
    rng = np.random.default_rng(seed)
    for name, p in sorted(layer.state_dict().items()):
        shape = p.shape
        if name.endswith("_variance"):
            v = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("_mean"):
            v = rng.normal(0, 0.2, shape)
        else:
            v = rng.normal(0, 0.3 if len(shape) > 1 else 0.1, shape)
        p.set_value(v.astype(p.numpy().dtype))


class ConvBn(nn.Layer):
    def __init__(self, cin, cout, k, stride=1, groups=1, act="relu"):
        super().__init__()
        self.conv = nn.Conv2D(cin, cout, k, stride=stride, padding=k // 2, groups=groups, bias_attr=False)
        self.bn = nn.BatchNorm2D(cout)
        self.act = act

    def forward(self, x):
        y = self.bn(self.conv(x))
        if self.act == "relu":
            return F.relu(y)
        if self.act == "hardswish":
            return F.hardswish(y)
        return y


class Bottleneck(nn.Layer):
    def __init__(self, c, mid):
        super().__init__()
        self.a = ConvBn(c, mid, 1)
        self.b = ConvBn(mid, mid, 3, groups=mid, act="hardswish")  # depthwise
        self.c = ConvBn(mid, c, 1, act="none")

    def forward(self, x):
        return F.relu(self.c(self.b(self.a(x))) + x)


class ResNetTiny(nn.Layer):
    def __init__(self):
        super().__init__()
        self.stem = ConvBn(3, 8, 3, stride=2)
        self.pool = nn.MaxPool2D(3, stride=2, padding=1)
        self.block = Bottleneck(8, 4)
        self.conv2 = nn.Conv2D(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 10)

    def forward(self, images):
        y = self.block(self.pool(self.stem(images)))
        y = self.conv2(y)
        y = y * F.hardsigmoid(y) - F.sigmoid(y) / (y * y + 1.0)
        y = nn.functional.adaptive_avg_pool2d(y, 1)
        y = paddle.flatten(y, 1)
        return self.fc(y)


class EncoderLayer(nn.Layer):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.q, self.k, self.v, self.o = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff1, self.ff2 = nn.Linear(d, ff), nn.Linear(ff, d)
        self.drop = nn.Dropout(0.1)

    def split(self, x):
        return paddle.transpose(paddle.reshape(x, [0, 0, self.heads, self.dh]), [0, 2, 1, 3])

    def forward(self, x, mask):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        s = paddle.matmul(q, k, transpose_y=True) * (self.dh ** -0.5) + mask
        a = paddle.matmul(F.softmax(s, axis=-1), v)
        a = paddle.reshape(paddle.transpose(a, [0, 2, 1, 3]), [0, 0, self.heads * self.dh])
        x = self.ln1(x + self.drop(self.o(a)))
        return self.ln2(x + self.drop(self.ff2(F.gelu(self.ff1(x)))))


class BertTiny(nn.Layer):
    def __init__(self, vocab=50, d=16, heads=2, ff=32, max_pos=32):
        super().__init__()
        self.word = nn.Embedding(vocab, d, padding_idx=0)
        self.pos = nn.Embedding(max_pos, d)
        self.types = nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d)
        self.layers = nn.LayerList([EncoderLayer(d, heads, ff) for _ in range(2)])
        self.pool = nn.Linear(d, d)

    def forward(self, input_ids, token_type_ids, attention_mask):
        n = paddle.shape(input_ids)[1]
        pos = self.pos.weight[:n]
        x = self.ln(self.word(input_ids) + self.types(token_type_ids) + pos)
        m = paddle.unsqueeze(paddle.cast(attention_mask, "float32"), [1, 2])
        m = (1.0 - m) * -10000.0
        for layer in self.layers:
            x = layer(x, m)
        pooled = paddle.tanh(self.pool(x[:, 0]))
        return x, pooled


class SplitTiny(nn.Layer):
    """paddle.split in both forms: equal parts (split_with_num) and sections with a -1."""

    def __init__(self):
        super().__init__()
        self.w = self.create_parameter([8])

    def forward(self, x):
        y = x + self.w
        a, b, c = paddle.split(y, 3, axis=1)
        d, e = paddle.split(y, [3, -1], axis=-1)
        return a * 2.0 + c, b, d, e


MODELS = {
    "resnet_tiny": dict(
        make=ResNetTiny,
        spec=[paddle.static.InputSpec([None, 3, 16, 16], "float32", "images")],
        outputs=["logits"],
    ),
    "bert_tiny": dict(
        make=BertTiny,
        spec=[paddle.static.InputSpec([None, None], "int64", "input_ids"),
              paddle.static.InputSpec([None, None], "int64", "token_type_ids"),
              paddle.static.InputSpec([None, None], "int64", "attention_mask")],
        outputs=["last_hidden_state", "pooler_output"],
    ),
    "split_tiny": dict(
        make=SplitTiny,
        spec=[paddle.static.InputSpec([None, 6, 8], "float32", "x")],
        outputs=["ac", "b", "d", "e"],
    ),
}


def cases(model):
    rng = np.random.default_rng(7)
    if model == "resnet_tiny":
        return [{"images": rng.normal(0, 1, (n, 3, 16, 16)).astype(np.float32)} for n in (1, 3)]
    if model == "split_tiny":
        return [{"x": rng.normal(0, 1, (n, 6, 8)).astype(np.float32)} for n in (1, 2)]
    out = []
    for b, s in ((1, 5), (2, 7)):
        ids = rng.integers(1, 50, (b, s)).astype(np.int64)
        mask = np.ones((b, s), np.int64)
        if b > 1:
            mask[1, s - 2:] = 0
            ids[1, s - 2:] = 0
        types = (np.arange(s)[None, :] >= s // 2).astype(np.int64).repeat(b, 0)
        out.append({"input_ids": ids, "token_type_ids": types, "attention_mask": mask})
    return out


# ---- the legacy form: static-mode programs (run in the `--legacy` interpreter only) ----

def op(type, ins, attrs=None, dtype="float32"):
    from paddle.base.layer_helper import LayerHelper
    h = LayerHelper(type)
    out = h.create_variable_for_type_inference(dtype)
    h.append_op(type=type, inputs=dict(ins), outputs={"Out": out}, attrs=attrs or {})
    return out


S = paddle.static


def conv_bn(x, cout, k, stride=1, groups=1, act="relu", name=None):
    y = S.nn.conv2d(x, cout, k, stride=stride, padding=k // 2, groups=groups, bias_attr=False)
    y = S.nn.batch_norm(y, is_test=True)
    if act == "relu": return F.relu(y)
    if act == "hardswish": return F.hardswish(y)
    return y

def split_static():
    x = S.data("x", [-1, 6, 8], "float32")
    y = x + S.create_parameter([8], "float32")
    a, b, c = paddle.split(y, 3, axis=1)
    d, e = paddle.split(y, [3, -1], axis=-1)
    return [x], [a * 2.0 + c, b, d, e]


def resnet_static():
    x = S.data("images", [-1, 3, 16, 16], "float32")
    y = conv_bn(x, 8, 3, stride=2)
    y = F.max_pool2d(y, 3, stride=2, padding=1)
    z = conv_bn(y, 4, 1)
    z = conv_bn(z, 4, 3, groups=4, act="hardswish")
    z = conv_bn(z, 8, 1, act="none")
    y = F.relu(z + y)
    y = S.nn.conv2d(y, 8, 3, padding=1)
    y = y * F.hardsigmoid(y) - op("sigmoid", {"X": y}) / (y * y + 1.0)
    y = F.adaptive_avg_pool2d(y, 1)
    y = paddle.flatten(y, 1)
    return [x], [S.nn.fc(y, 10)]

def bert_static(vocab=50, d=16, heads=2, ff=32):
    ids = S.data("input_ids", [-1, -1], "int64")
    tt = S.data("token_type_ids", [-1, -1], "int64")
    am = S.data("attention_mask", [-1, -1], "int64")
    w = S.create_parameter([vocab, d], "float32")
    pw = S.create_parameter([32, d], "float32")
    tw = S.create_parameter([2, d], "float32")
    n = paddle.shape(ids)[1]
    pos = paddle.slice(pw, [0], [0], [n])
    x = F.embedding(ids, w, padding_idx=0) + F.embedding(tt, tw) + pos
    x = S.nn.layer_norm(x, begin_norm_axis=2)
    m = paddle.unsqueeze(paddle.cast(am, "float32"), [1, 2])
    m = paddle.scale(m, -1.0, 1.0) * -10000.0
    dh = d // heads
    for _ in range(2):
        def split(t):
            return paddle.transpose(paddle.reshape(t, [0, 0, heads, dh]), [0, 2, 1, 3])
        q = split(S.nn.fc(x, d, num_flatten_dims=2))
        k = split(S.nn.fc(x, d, num_flatten_dims=2))
        v = split(S.nn.fc(x, d, num_flatten_dims=2))
        s = op("matmul_v2", {"X": q, "Y": k}, {"trans_x": False, "trans_y": True}) * (dh ** -0.5) + m
        a = op("matmul", {"X": F.softmax(s, axis=-1), "Y": v}, {"transpose_X": False, "transpose_Y": False, "alpha": 1.0})
        a = paddle.reshape(paddle.transpose(a, [0, 2, 1, 3]), [0, 0, d])
        o = F.dropout(S.nn.fc(a, d, num_flatten_dims=2), 0.1, training=False)
        x = S.nn.layer_norm(x + o, begin_norm_axis=2)
        h = op("gelu", {"X": S.nn.fc(x, ff, num_flatten_dims=2)}, {"approximate": True})
        h = F.dropout(S.nn.fc(h, d, num_flatten_dims=2), 0.1, training=False, mode="downscale_in_infer")
        x = S.nn.layer_norm(x + h, begin_norm_axis=2)
    first = paddle.squeeze(paddle.slice(x, [1], [0], [1]), [1])
    pooled = op("tanh", {"X": S.nn.fc(first, d)})
    return [ids, tt, am], [x, pooled]


def save_legacy(out):
    paddle.enable_static()
    exe = S.Executor(paddle.CPUPlace())
    for i, (name, fn) in enumerate((("resnet_tiny", resnet_static), ("bert_tiny", bert_static),
                                    ("split_tiny", split_static))):
        main, start = S.Program(), S.Program()
        with S.program_guard(main, start):
            feeds, fetches = fn()
        scope = S.global_scope()
        exe.run(start)
        rng = np.random.default_rng(200 + i)
        for v in sorted(main.list_vars(), key=lambda v: v.name):
            if not v.persistable or v.name in ("feed", "fetch") or scope.find_var(v.name) is None:
                continue
            t = scope.find_var(v.name).get_tensor()
            shape = np.array(t).shape
            if "batch_norm" in v.name and v.name.endswith(".w_2"):  # variance
                a = rng.uniform(0.5, 1.5, shape)
            elif "batch_norm" in v.name and v.name.endswith(".w_1"):  # mean
                a = rng.normal(0, 0.2, shape)
            else:
                a = rng.normal(0, 0.3 if len(shape) > 1 else 0.1, shape)
            t.set(a.astype(np.array(t).dtype), paddle.CPUPlace())
        d = os.path.join(out, name, "legacy")
        os.makedirs(d, exist_ok=True)
        S.save_inference_model(os.path.join(d, "inference"), feeds, fetches, exe, program=main)
        # The reference: the saved files loaded back.
        prog, feed_names, fetch_vars = S.load_inference_model(os.path.join(d, "inference"), exe)
        for k, feeds_np in enumerate(cases(name)):
            got = exe.run(prog, feed={n: feeds_np[n] for n in feed_names}, fetch_list=fetch_vars)
            for n, v in zip(MODELS[name]["outputs"], got):
                np.save(os.path.join(out, f"{name}.{k}.{n}.legacy.npy"), np.asarray(v))


def save(out, form):
    for i, (name, m) in enumerate(MODELS.items()):
        paddle.seed(i)
        layer = m["make"]()
        randomize(layer, 100 + i)
        layer.eval()
        d = os.path.join(out, name, form)
        os.makedirs(d, exist_ok=True)
        paddle.jit.save(layer, os.path.join(d, "inference"), input_spec=m["spec"])
        info = os.path.join(d, "inference.pdiparams.info")  # training-only metadata
        if os.path.exists(info):
            os.remove(info)


def program_outputs(d, form):
    """The output names the saved program gives, in fetch order."""
    if form == "pir":
        with open(os.path.join(d, "inference.json")) as f:
            prog = json.load(f)
        names = []
        for op in prog["program"]["regions"][0]["blocks"][0]["ops"]:
            if op["#"] == "1.fetch":
                a = {x["N"]: x["AT"]["D"] for x in op["A"]}
                names.append((a["col"], a["name"]))
        return [n for _, n in sorted(names)]
    from paddle.base.proto import framework_pb2
    p = framework_pb2.ProgramDesc()
    with open(os.path.join(d, "inference.pdmodel"), "rb") as f:
        p.ParseFromString(f.read())
    names = []
    for op in p.blocks[0].ops:
        if op.type == "fetch":
            col = [a.i for a in op.attrs if a.name == "col"][0]
            names.append((col, [v.arguments[0] for v in op.inputs if v.parameter == "X"][0]))
    return [n for _, n in sorted(names)]


def reference(out):
    manifest = {"_made_with": {"paddle": paddle.__version__}}
    for name, m in MODELS.items():
        entry = {"cases": [], "inputs": [s.name for s in m["spec"]], "outputs": m["outputs"], "forms": {}}
        loaded = paddle.jit.load(os.path.join(out, name, "pir", "inference"))
        loaded.eval()
        for k, feeds in enumerate(cases(name)):
            got = loaded(*[paddle.to_tensor(feeds[n]) for n in entry["inputs"]])
            got = got if isinstance(got, (list, tuple)) else [got]
            for n, v in feeds.items():
                np.save(os.path.join(out, f"{name}.{k}.{n}.npy"), v)
            for n, v in zip(m["outputs"], got):
                np.save(os.path.join(out, f"{name}.{k}.{n}.npy"), v.numpy())
            entry["cases"].append(k)
        for form in ("pir", "legacy"):
            d = os.path.join(out, name, form)
            if not os.path.isdir(d):
                continue
            entry["forms"][form] = {"program": "inference.json" if form == "pir" else "inference.pdmodel",
                                    "outputs": program_outputs(d, form),
                                    "reference_suffix": "" if form == "pir" else ".legacy"}
        manifest[name] = entry
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    here = os.path.dirname(os.path.abspath(__file__))
    out = args[0] if args else os.path.join(here, "..", "data", "classic_paddle")
    if "--legacy" in sys.argv:
        save_legacy(out)
        return
    save(out, "pir")
    if "--no-legacy" not in sys.argv:
        subprocess.run([sys.executable, os.path.abspath(__file__), out, "--legacy"], check=True)
    reference(out)


if __name__ == "__main__":
    main()
