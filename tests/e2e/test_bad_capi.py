"""End-to-end: bad input through the C API's Python binding must give the documented error code
and a message, never a crash (also run under ASan+UBSan, label e2e_bad).

Covers configs (bad values, missing or malformed model dirs), predictor inputs (no data, wrong
dtype, rank, byte size, ids outside the vocabulary, unknown names), generation requests (empty
or out-of-vocabulary prompts, bad sampling parameters), and handles: closed, foreign, of the
wrong kind, random integers passed to every function of the API.
Environment (set by CTest): SAMPAN_LIBRARY (libsampan.so).
"""

import ctypes
import os
import random
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402
import serve_util as su  # noqa: E402


class Checker:
    def __init__(self, res, sampan):
        self.res = res
        self.sampan = sampan

    def fails(self, name, code, fn, *args, **kwargs):
        """fn(*args) must raise SampanError with status `code` and a non-empty message."""
        try:
            fn(*args, **kwargs)
        except self.sampan.SampanError as e:
            ok = e.status == code and len(e.message) > 0
            return self.res.check(name, ok, f"{e.name}: {e.message}")
        return self.res.check(name, False, "no error raised")

    def status(self, name, codes, status):
        """A raw C call's status must be one of `codes`, with a message."""
        msg = self.sampan.lib.sampan_last_error().decode(errors="replace")
        names = [self.sampan.lib.sampan_status_name(c).decode() for c in codes]
        got = self.sampan.lib.sampan_status_name(status).decode()
        return self.res.check(name, status in codes and len(msg) > 0,
                              f"{got} (want {' or '.join(names)}): {msg}")


def check_configs(c, sampan, args):
    S = sampan
    # A CUDA device is UNSUPPORTED where no GPU is visible (or the build has no CUDA), and the
    # message says which; on a GPU machine the config accepts it.
    try:
        S.Config(device="cuda")
        c.res.check("device cuda: accepted (a GPU is visible)", True)
    except S.SampanError as e:
        c.res.check("device cuda: UNSUPPORTED, naming why", e.status == S.UNSUPPORTED and
                    ("CUDA" in e.message or "cuda" in e.message), f"{e.name}: {e.message}")
    c.fails("unknown device", S.INVALID_ARGUMENT, S.Config, device="npu")
    c.fails("negative threads", S.INVALID_ARGUMENT, S.Config, threads=-3)
    c.fails("unknown precision", S.INVALID_ARGUMENT, S.Config, precision="int3")
    c.fails("unknown kv dtype", S.INVALID_ARGUMENT, S.Config, kv_cache_dtype="f12")
    c.fails("int4 group size 100", S.INVALID_ARGUMENT, S.Config, int4_group_size=100)
    c.fails("zero kv cache bytes", S.INVALID_ARGUMENT, S.Config, kv_cache_bytes=0)
    c.fails("predictor without model dir", S.INVALID_ARGUMENT, S.Predictor, S.Config())
    c.fails("missing model dir", S.NOT_FOUND, S.Predictor, S.Config("/nonexistent/model"))
    bad = os.path.join(args.work_dir, "malformed_model")
    os.makedirs(bad, exist_ok=True)
    with open(os.path.join(bad, "config.json"), "w") as f:
        f.write('{"architectures": ["LlamaForCausalLM"], "hidden_size": ')
    c.fails("malformed config.json", S.INVALID_MODEL, S.Predictor, S.Config(bad))
    tiny = os.path.join(eu.models_dir(args), "tiny_llama3")
    try:
        S.Engine(S.Config(tiny, threads=1, kv_cache_bytes=1 << 20))
        c.res.check("engine on a model without tokenizer fails", False, "no error")
    except S.SampanError as e:
        c.res.check("engine on a model without tokenizer fails",
                    e.status in (S.NOT_FOUND, S.INVALID_MODEL), str(e))


def check_predictor(c, sampan, args):
    S = sampan
    p = S.Predictor(S.Config(os.path.join(eu.models_dir(args), "tiny_llama3"), threads=1))
    c.fails("run before any input", S.INVALID_ARGUMENT, p.run)
    c.fails("unknown input name", S.NOT_FOUND, p.get_input_handle, "tokens")
    c.fails("unknown output name", S.NOT_FOUND, p.get_output_handle, "hidden")
    t = p.get_input_handle("input_ids")
    out = p.get_output_handle("logits")
    c.fails("copy_to_cpu before run", S.INVALID_ARGUMENT, out.copy_to_cpu)
    c.fails("reshape an output", S.INVALID_ARGUMENT, out.reshape, (1, 3))
    c.fails("float32 ids", S.INVALID_ARGUMENT, p.run, np.zeros((1, 4), np.float32))
    c.fails("rank-3 ids", S.INVALID_ARGUMENT, p.run, np.zeros((1, 2, 3), np.int64))
    c.fails("seq 0", S.INVALID_ARGUMENT, p.run, np.zeros((1, 0), np.int64))
    c.fails("batch 0", S.INVALID_ARGUMENT, p.run, np.zeros((0, 4), np.int64))
    c.fails("id = vocab", S.INVALID_ARGUMENT, p.run, np.array([[1, 2, 397]]))
    c.fails("negative id", S.INVALID_ARGUMENT, p.run, np.array([[1, -2, 3]], np.int32))
    c.fails("id beyond int32", S.INVALID_ARGUMENT, p.run, np.array([[1, 2**40]]))
    c.fails("seq beyond max_position_embeddings", S.INVALID_ARGUMENT, p.run,
            np.ones((1, 4097), np.int64))
    t.reshape((2, 3))
    c.fails("copy 5 ids into a [2, 3] input", S.INVALID_ARGUMENT, t.copy_from_cpu,
            np.ones(5, np.int64))
    # Byte sizes larger than the buffer are refused before anything is read (ASan would see a
    # read past the 6 ids otherwise).
    buf = np.ones(6, np.int64)
    st = sampan.lib.sampan_tensor_copy_from_cpu(t.handle, 3, buf.ctypes.data_as(ctypes.c_void_p),
                                                1 << 40)
    c.status("huge byte size", [S.INVALID_ARGUMENT], st)
    st = sampan.lib.sampan_tensor_copy_from_cpu(t.handle, 42, buf.ctypes.data_as(ctypes.c_void_p),
                                                48)
    c.status("unknown dtype code", [S.INVALID_ARGUMENT], st)
    dims = (ctypes.c_int64 * 2)(2, -1)
    c.status("negative dim", [S.INVALID_ARGUMENT], sampan.lib.sampan_tensor_reshape(t.handle, dims, 2))
    c.status("rank 0", [S.INVALID_ARGUMENT], sampan.lib.sampan_tensor_reshape(t.handle, dims, 0))
    c.status("rank 100", [S.INVALID_ARGUMENT], sampan.lib.sampan_tensor_reshape(t.handle, dims, 100))
    t.reshape((2, 3))
    t.copy_from_cpu(np.ones((2, 3), np.int32))
    p.run()
    logits = out.copy_to_cpu()
    c.res.check("a good run after all that", logits.shape == (2, 3, 397) and
                np.isfinite(logits).all(), str(logits.shape))
    small = np.empty(10, np.float32)
    st = sampan.lib.sampan_tensor_copy_to_cpu(out.handle, S._capi.DTYPE_F32,
                                              small.ctypes.data_as(ctypes.c_void_p), 40)
    c.status("copy_to_cpu into a too small buffer", [S.INVALID_ARGUMENT], st)
    st = sampan.lib.sampan_tensor_copy_to_cpu(out.handle, S._capi.DTYPE_F32, None,
                                              logits.nbytes)
    c.status("copy_to_cpu into NULL", [S.INVALID_ARGUMENT], st)

    stale_pred, stale_tensor = p.handle.value, t.handle.value
    p.close()
    c.fails("closed predictor", S.INVALID_HANDLE, p.run, np.ones((1, 2), np.int64))
    c.status("stale predictor handle", [S.INVALID_HANDLE],
             sampan.lib.sampan_predictor_run(stale_pred))
    c.status("stale predictor destroyed twice", [S.INVALID_HANDLE],
             sampan.lib.sampan_predictor_destroy(stale_pred))
    c.fails("tensor of a destroyed predictor", S.INVALID_HANDLE, t.reshape, (1, 2))
    c.status("stale tensor handle", [S.INVALID_HANDLE],
             sampan.lib.sampan_tensor_get_dtype(stale_tensor, ctypes.byref(ctypes.c_int32())))


def check_engine(c, sampan, args, model):
    S = sampan
    e = S.Engine(S.Config(model, threads=1, kv_cache_bytes=8 << 20, max_model_len=64))
    c.fails("empty prompt", S.INVALID_ARGUMENT, e.generate, [])
    c.fails("id outside the vocabulary", S.INVALID_ARGUMENT, e.generate, [1, 32000])
    c.fails("negative id", S.INVALID_ARGUMENT, e.generate, [1, -5])
    c.fails("prompt of max_model_len", S.INVALID_ARGUMENT, e.generate, [5] * 64)
    c.fails("max_tokens 0", S.INVALID_ARGUMENT, e.generate, "hi", max_tokens=0)
    c.fails("negative temperature", S.INVALID_ARGUMENT, e.generate, "hi", temperature=-1)
    c.fails("NaN temperature", S.INVALID_ARGUMENT, e.generate, "hi", temperature=float("nan"))
    c.fails("top_p 0", S.INVALID_ARGUMENT, e.generate, "hi", top_p=0.0)
    c.fails("top_p 2", S.INVALID_ARGUMENT, e.generate, "hi", top_p=2.0)
    c.fails("negative top_k", S.INVALID_ARGUMENT, e.generate, "hi", top_k=-1)
    c.fails("empty stop string", S.INVALID_ARGUMENT, e.generate, "hi", stop=[""])
    g = e.generate("\xff odd \u0000 text \udbff".encode("utf-8", "surrogatepass").decode(
        "utf-8", "replace"), max_tokens=3, temperature=0.7, seed=3)
    g.result()
    c.res.check("odd text prompt generates", g.final is not None and g.final.finish_reason in
                ("length", "stop"), repr(g.final))
    ev = ctypes.c_void_p()
    c.status("poll after the end", [S.END_OF_STREAM],
             sampan.lib.sampan_request_poll(g.handle, 0, ctypes.byref(ev)))
    stale_req = g.handle.value
    g.close()
    c.status("stale request handle", [S.INVALID_HANDLE],
             sampan.lib.sampan_request_cancel(stale_req))
    # An engine handle passed where a request belongs, and a request still running when the
    # engine is closed.
    c.status("engine as request", [S.INVALID_HANDLE], sampan.lib.sampan_request_cancel(e.handle))
    live = e.generate([5, 6, 7], max_tokens=50, temperature=0, ignore_eos=True)
    e.close()
    live.result()
    c.res.check("closing the engine ends a running request",
                live.final.finish_reason in ("cancelled", "length"), repr(live.final))
    live.close()
    c.fails("closed engine", S.INVALID_HANDLE, e.generate, "hi")


def fuzz_handles(c, sampan):
    """Every function taking a handle first, given random integers and foreign pointers."""
    from sampan import _capi
    rng = random.Random(5)
    foreign = ctypes.create_string_buffer(64)
    values = [ctypes.addressof(foreign), 1, 0x5a3d0008, 0xdeadbeef, 2**63 - 8] + [
        rng.randrange(1, 2**48) for _ in range(5)]
    bad, calls = [], 0
    for name, (_, argtypes) in _capi._PROTOTYPES.items():
        if not argtypes or argtypes[0] is not _capi.H or name.endswith("_create"):
            continue
        for v in values:
            rest = []
            for a in argtypes[1:]:
                if a is _capi.EVENT_CALLBACK:
                    rest.append(_capi.EVENT_CALLBACK())
                elif a in (ctypes.c_char_p,):
                    rest.append(b"x")
                elif isinstance(a, type) and issubclass(a, ctypes._SimpleCData) and a not in (
                        ctypes.c_void_p,):
                    rest.append(1)
                else:
                    rest.append(None)
            st = getattr(sampan.lib, name)(v, *rest)
            calls += 1
            if st not in (sampan.INVALID_HANDLE, sampan.INVALID_ARGUMENT):
                bad.append(f"{name}({v:#x}) -> {st}")
    c.res.check("random handles to every function", not bad,
                f"{calls} calls" if not bad else "; ".join(bad[:5]))


def main():
    args = eu.parse_args(__doc__.splitlines()[0])
    os.environ.setdefault("SAMPAN_LOG_LEVEL", "warn")
    lib = os.environ.get("SAMPAN_LIBRARY") or os.path.join(os.path.dirname(args.sampan),
                                                           "libsampan.so")
    os.environ["SAMPAN_LIBRARY"] = lib
    eu.sanitizer_preload(lib)
    sys.path.insert(0, os.path.join(args.source_dir, "clients", "python"))
    res = eu.Results()
    if not res.check("libsampan present", os.path.isfile(lib), lib):
        res.finish()
    import sampan
    c = Checker(res, sampan)
    check_configs(c, sampan, args)
    check_predictor(c, sampan, args)
    model = su.make_serve_model(args)
    check_engine(c, sampan, args, model)
    fuzz_handles(c, sampan)
    res.finish()


if __name__ == "__main__":
    main()
