"""Python binding of Sampan's C API (engine/capi/sampan.h) over ctypes.

    import numpy as np, sampan
    cfg = sampan.Config("path/to/model", threads=2)
    with sampan.Predictor(cfg) as p:
        logits = p.run(np.array([[1, 2, 3]], dtype=np.int64))   # [batch, seq, vocab] f32

    # A classic model (an .onnx file, or a directory holding one): its own inputs and outputs.
    with sampan.Predictor(sampan.Config("resnet.onnx", threads=2)) as p:
        print(p.input_names, p.get_input_handle("images").declared_shape)  # ('batch', 3, 'h', 'w')
        out = p.run({"images": np.zeros((1, 3, 32, 32), np.float32)})   # {"logits": array}
        # Paddle style: handle -> reshape -> copy_from_cpu -> run() -> copy_to_cpu
        t = p.get_input_handle("images")
        t.reshape((1, 3, 32, 32))
        t.copy_from_cpu(np.zeros((1, 3, 32, 32), np.float32))
        p.run()
        logits = p.get_output_handle("logits").copy_to_cpu()
    with sampan.Engine(cfg) as e:
        for ev in e.generate("Hello", max_tokens=8, temperature=0):
            print(ev.text, end="")

Every C error becomes a SampanError carrying the status code, its name and the library's message.
Objects free their handles on close() (or leaving a `with` block, or garbage collection).
Thread-safety follows the C API: a Predictor is for one thread at a time (clone() one per thread);
an Engine may be shared by threads, each iterating its own Generation.
"""

import ctypes
import json

import numpy as np

from . import _capi
from ._capi import (CANCELLED, DEADLINE_EXCEEDED, END_OF_STREAM, INTERNAL, INVALID_ARGUMENT,
                    INVALID_HANDLE, INVALID_MODEL, IO, NOT_FOUND, OK, OUT_OF_MEMORY,
                    RESOURCE_EXHAUSTED, TIMEOUT, UNAVAILABLE, UNSUPPORTED)

__all__ = [
    "SampanError", "Config", "Predictor", "Tensor", "Engine", "Generation", "Event", "lib",
    "version", "OK", "INVALID_ARGUMENT", "NOT_FOUND", "INVALID_MODEL", "UNSUPPORTED",
    "OUT_OF_MEMORY", "IO", "INTERNAL", "RESOURCE_EXHAUSTED", "UNAVAILABLE", "CANCELLED",
    "DEADLINE_EXCEEDED", "INVALID_HANDLE", "TIMEOUT", "END_OF_STREAM",
]

lib = _capi.load_library()
_LITTLE = np.little_endian
_NO_CALLBACK = _capi.EVENT_CALLBACK()  # NULL: events are queued for polling

_NP_DTYPES = {_capi.DTYPE_F32: np.float32, _capi.DTYPE_I32: np.int32, _capi.DTYPE_I64: np.int64,
              _capi.DTYPE_BOOL: np.bool_, _capi.DTYPE_U8: np.uint8}
_DTYPE_OF_NP = {np.dtype(v): k for k, v in _NP_DTYPES.items()}


class SampanError(Exception):
    def __init__(self, status, message, call=""):
        self.status = status
        self.name = lib.sampan_status_name(status).decode()
        self.message = message
        super().__init__(f"{call}: {self.name}: {message}" if call else f"{self.name}: {message}")


def _check(status, call):
    if status != OK:
        raise SampanError(status, lib.sampan_last_error().decode(errors="replace"), call)


def _call(name, *args):
    _check(getattr(lib, name)(*args), name)


def version():
    return lib.sampan_version().decode()


class _Handle:
    """Owns one C handle; `_destroy` is the C function that frees it."""
    _destroy = None

    def __init__(self, handle):
        self._h = handle

    @property
    def handle(self):
        if self._h is None:
            raise SampanError(INVALID_HANDLE, f"{type(self).__name__} is closed")
        return self._h

    def close(self):
        if self._h is not None and self._destroy is not None:
            h, self._h = self._h, None
            _call(self._destroy, h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the process frees everything anyway
            pass


class Config(_Handle):
    """Options of a predictor or engine (sampan_config_*). None leaves the library's default."""
    _destroy = "sampan_config_destroy"

    def __init__(self, model_dir=None, device=None, threads=None, precision=None,
                 kv_cache_dtype=None, max_model_len=None, kv_cache_bytes=None,
                 max_batch_size=None, int4_group_size=None, params_file=None, lora=None):
        """model_dir: a Hugging Face model directory, an .onnx file or a directory holding one.
        lora: {name: PEFT adapter directory} an engine serves besides the base model; a request
        picks one with Engine.generate(..., lora=name).
        params_file: Paddle's separate params file (no format takes one yet: a predictor made
        with it fails with UNSUPPORTED).
        precision: "f32", "bf16", "fp8" or "int4". A classic model (ONNX, Paddle) computes in f32
        unless precision="bf16" is given: then its convs and matmuls by constant weights run on
        bf16-rounded inputs with f32 sums."""
        h = ctypes.c_void_p()
        _call("sampan_config_create", ctypes.byref(h))
        super().__init__(h)
        strings = {"model_dir": model_dir, "device": device, "precision": precision,
                   "kv_cache_dtype": kv_cache_dtype, "params_file": params_file}
        for key, value in strings.items():
            if value is not None:
                _call(f"sampan_config_set_{key}", self.handle, str(value).encode())
        ints = {"threads": threads, "max_model_len": max_model_len,
                "kv_cache_bytes": kv_cache_bytes, "max_batch_size": max_batch_size,
                "int4_group_size": int4_group_size}
        for key, value in ints.items():
            if value is not None:
                _call(f"sampan_config_set_{key}", self.handle, int(value))
        for name, path in (lora or {}).items():
            self.add_lora(name, path)

    def add_lora(self, name, path):
        """Adds a LoRA adapter (read when an engine is created from this config)."""
        _call("sampan_config_add_lora", self.handle, str(name).encode(), str(path).encode())

    @property
    def loras(self):
        """{name: directory} of the adapters added, in order."""
        n = ctypes.c_int32()
        _call("sampan_config_get_lora_count", self.handle, ctypes.byref(n))
        out = {}
        for i in range(n.value):
            name, path = ctypes.c_char_p(), ctypes.c_char_p()
            _call("sampan_config_get_lora", self.handle, i, ctypes.byref(name), ctypes.byref(path))
            out[name.value.decode()] = path.value.decode()
        return out

    def get(self, key):
        """One option's current value, e.g. get("threads")."""
        if key in ("model_dir", "device", "precision", "kv_cache_dtype", "params_file"):
            out = ctypes.c_char_p()
        elif key in ("max_model_len", "kv_cache_bytes"):
            out = ctypes.c_int64()
        else:
            out = ctypes.c_int32()
        _call(f"sampan_config_get_{key}", self.handle, ctypes.byref(out))
        return out.value.decode() if isinstance(out, ctypes.c_char_p) else out.value


class Tensor:
    """An input or output of a Predictor (the handle belongs to the predictor)."""

    def __init__(self, predictor, handle):
        self._predictor = predictor  # keeps the predictor (and so the handle) alive
        self.handle = handle

    @property
    def name(self):
        out = ctypes.c_char_p()
        _call("sampan_tensor_get_name", self.handle, ctypes.byref(out))
        return out.value.decode()

    @property
    def shape(self):
        rank = ctypes.c_int32()
        _call("sampan_tensor_get_shape", self.handle, None, 0, ctypes.byref(rank))
        dims = (ctypes.c_int64 * max(rank.value, 1))()
        _call("sampan_tensor_get_shape", self.handle, dims, rank.value, ctypes.byref(rank))
        return tuple(dims[i] for i in range(rank.value))

    @property
    def dtype(self):
        """numpy dtype of the data, or None before any."""
        out = ctypes.c_int32()
        _call("sampan_tensor_get_dtype", self.handle, ctypes.byref(out))
        return np.dtype(_NP_DTYPES[out.value]) if out.value in _NP_DTYPES else None

    @property
    def model_shape(self):
        """The shape the model declares, -1 for every dim the caller chooses (symbolic)."""
        rank = ctypes.c_int32()
        _call("sampan_tensor_get_model_shape", self.handle, None, 0, ctypes.byref(rank))
        dims = (ctypes.c_int64 * max(rank.value, 1))()
        _call("sampan_tensor_get_model_shape", self.handle, dims, rank.value, ctypes.byref(rank))
        return tuple(dims[i] for i in range(rank.value))

    @property
    def dim_names(self):
        """Per declared dim: its symbol ("batch", "sequence"), or "" for a fixed one."""
        names = []
        for i in range(len(self.model_shape)):
            s = ctypes.c_char_p()
            _call("sampan_tensor_get_dim_name", self.handle, i, ctypes.byref(s))
            names.append(s.value.decode())
        return tuple(names)

    @property
    def declared_shape(self):
        """The declared shape with symbolic dims by name: ("batch", 3, "h", "w")."""
        return tuple(n if d < 0 else d for d, n in zip(self.model_shape, self.dim_names))

    @property
    def model_dtype(self):
        """numpy dtype the model takes (an input) or gives back (an output); None for an input
        the C API cannot feed."""
        out = ctypes.c_int32()
        _call("sampan_tensor_get_model_dtype", self.handle, ctypes.byref(out))
        return np.dtype(_NP_DTYPES[out.value]) if out.value in _NP_DTYPES else None

    def reshape(self, shape):
        dims = (ctypes.c_int64 * max(len(shape), 1))(*[int(d) for d in shape])
        _call("sampan_tensor_reshape", self.handle, dims, len(shape))

    def copy_from_cpu(self, array):
        """Copies a float32/int32/int64/bool/uint8 array in; its shape must be the one set by
        reshape()."""
        a = np.ascontiguousarray(array)
        if a.dtype.byteorder == ">" or (a.dtype.byteorder == "<" and not _LITTLE):
            a = a.astype(a.dtype.newbyteorder("="))
        if a.dtype not in _DTYPE_OF_NP:
            raise SampanError(INVALID_ARGUMENT, f"unsupported numpy dtype {a.dtype}")
        _call("sampan_tensor_copy_from_cpu", self.handle, _DTYPE_OF_NP[a.dtype],
              a.ctypes.data_as(ctypes.c_void_p), a.nbytes)

    def copy_to_cpu(self):
        dt = self.dtype
        if dt is None:  # no data: the library reports why (and how to fix it)
            _call("sampan_tensor_copy_to_cpu", self.handle, _capi.DTYPE_F32, None, 0)
            raise SampanError(INTERNAL, f"tensor '{self.name}' has no data")
        out = np.empty(self.shape, dtype=dt)
        _call("sampan_tensor_copy_to_cpu", self.handle, _DTYPE_OF_NP[dt],
              out.ctypes.data_as(ctypes.c_void_p), out.nbytes)
        return out


class Predictor(_Handle):
    """A loaded tensor model (sampan_predictor_*). A decoder language model: input "input_ids"
    [batch, seq], output "logits" [batch, seq, vocab]. A classic model (ONNX): the model's own
    inputs and outputs by name (see Tensor.declared_shape and Tensor.model_dtype)."""
    _destroy = "sampan_predictor_destroy"

    def __init__(self, config=None, _handle=None):
        if _handle is None:
            h = ctypes.c_void_p()
            _call("sampan_predictor_create", config.handle, ctypes.byref(h))
            _handle = h
        super().__init__(_handle)

    def _names(self, kind):
        n = ctypes.c_int32()
        _call(f"sampan_predictor_get_{kind}_num", self.handle, ctypes.byref(n))
        names = []
        for i in range(n.value):
            s = ctypes.c_char_p()
            _call(f"sampan_predictor_get_{kind}_name", self.handle, i, ctypes.byref(s))
            names.append(s.value.decode())
        return names

    @property
    def input_names(self):
        return self._names("input")

    @property
    def output_names(self):
        return self._names("output")

    def get_input_handle(self, name):
        h = ctypes.c_void_p()
        _call("sampan_predictor_get_input_handle", self.handle, name.encode(), ctypes.byref(h))
        return Tensor(self, h)

    def get_output_handle(self, name):
        h = ctypes.c_void_p()
        _call("sampan_predictor_get_output_handle", self.handle, name.encode(), ctypes.byref(h))
        return Tensor(self, h)

    def _feed(self, name, array):
        t = self.get_input_handle(name)
        t.reshape(array.shape)
        t.copy_from_cpu(array)

    def outputs(self):
        """{output name: array} of the last run."""
        return {n: self.get_output_handle(n).copy_to_cpu() for n in self.output_names}

    def run(self, inputs=None):
        """run(): runs on the inputs already copied in (Paddle style); returns None.
        run({name: array, ...}): copies every input in (reshape + copy_from_cpu), runs, returns
        {output name: array}.
        run([array, ...]) (a list or tuple of numpy arrays): the inputs in input_names order;
        returns the outputs as a list in output_names order.
        run(array): the model's first input (a decoder's input_ids). When the array has one dim
        fewer than the model declares and the model's first dim is symbolic (a decoder's [seq]
        for one sequence), a batch of one is added and taken off the outputs again. Returns the
        first output (a decoder's logits), or a list when the model has several."""
        if inputs is None:
            _call("sampan_predictor_run", self.handle)
            return None
        if isinstance(inputs, dict):
            for name, a in inputs.items():
                self._feed(name, np.asarray(a))
            _call("sampan_predictor_run", self.handle)
            return self.outputs()
        if isinstance(inputs, (list, tuple)) and inputs and all(
                isinstance(a, np.ndarray) for a in inputs):
            names = self.input_names
            if len(inputs) != len(names):
                raise SampanError(INVALID_ARGUMENT, f"{len(inputs)} arrays for the model's "
                                  f"{len(names)} inputs ({', '.join(names)})")
            for name, a in zip(names, inputs):
                self._feed(name, a)
            _call("sampan_predictor_run", self.handle)
            return [self.get_output_handle(n).copy_to_cpu() for n in self.output_names]
        a = np.asarray(inputs)
        t = self.get_input_handle(self.input_names[0])
        declared = t.model_shape
        squeeze = a.ndim >= 1 and len(declared) == a.ndim + 1 and declared[0] < 0
        if squeeze:
            a = a[None, ...]
        t.reshape(a.shape)
        t.copy_from_cpu(a)
        _call("sampan_predictor_run", self.handle)
        outs = [self.get_output_handle(n).copy_to_cpu() for n in self.output_names]
        if squeeze:
            outs = [o[0] if o.ndim >= 1 and o.shape[0] == 1 else o for o in outs]
        return outs[0] if len(outs) == 1 else outs

    def clone(self):
        """A predictor sharing the weights, for another thread."""
        h = ctypes.c_void_p()
        _call("sampan_predictor_clone", self.handle, ctypes.byref(h))
        return Predictor(_handle=h)


class Event:
    """One generation event, copied out of the C event."""

    def __init__(self, h):
        tok = ctypes.c_int32()
        _call("sampan_event_get_token", h, ctypes.byref(tok))
        text, n = ctypes.c_void_p(), ctypes.c_uint64()
        _call("sampan_event_get_text", h, ctypes.byref(text), ctypes.byref(n))
        fin = ctypes.c_int32()
        _call("sampan_event_is_finished", h, ctypes.byref(fin))
        reason = ctypes.c_int32()
        _call("sampan_event_get_finish_reason", h, ctypes.byref(reason))
        lp = ctypes.c_float()
        _call("sampan_event_get_logprob", h, ctypes.byref(lp))
        plp, n_plp = ctypes.POINTER(ctypes.c_float)(), ctypes.c_int64()
        _call("sampan_event_get_prompt_logprobs", h, ctypes.byref(plp), ctypes.byref(n_plp))
        usage = [ctypes.c_int64() for _ in range(3)]
        _call("sampan_event_get_usage", h, *[ctypes.byref(u) for u in usage])
        err = ctypes.c_char_p()
        _call("sampan_event_get_error", h, ctypes.byref(err))
        self.token = tok.value
        self.text = ctypes.string_at(text.value, n.value).decode(errors="replace") if n.value else ""
        self.finished = bool(fin.value)
        self.finish_reason = _capi.FINISH_NAMES.get(reason.value)
        self.logprob = lp.value
        # With prompt_logprobs, on the first event: prompt token i + 1's log-probability at i.
        self.prompt_logprobs = [plp[i] for i in range(n_plp.value)]
        self.prompt_tokens, self.completion_tokens, self.cached_prompt_tokens = (
            u.value for u in usage)
        self.error = err.value.decode(errors="replace") if err.value else ""

    def __repr__(self):
        return (f"Event(token={self.token}, text={self.text!r}, finished={self.finished}, "
                f"finish_reason={self.finish_reason})")


class Generation(_Handle):
    """A submitted request in poll mode: iterate it for Events (the last one has finished=True),
    cancel() from any thread. `tokens`, `text`, `prompt_logprobs` (asked for with
    generate(prompt_logprobs=True)) and `final` accumulate as it is iterated."""
    _destroy = "sampan_request_destroy"

    def __init__(self, handle, poll_timeout_ms=-1):
        super().__init__(handle)
        self.poll_timeout_ms = poll_timeout_ms
        self.tokens = []
        self.text = ""
        self.prompt_logprobs = []
        self.final = None

    def __iter__(self):
        return self

    def __next__(self):
        if self.final is not None:
            raise StopIteration
        ev = ctypes.c_void_p()
        status = lib.sampan_request_poll(self.handle, self.poll_timeout_ms, ctypes.byref(ev))
        if status == END_OF_STREAM:
            raise StopIteration
        _check(status, "sampan_request_poll")
        e = Event(ev)
        if e.token >= 0:
            self.tokens.append(e.token)
        self.prompt_logprobs += e.prompt_logprobs
        self.text += e.text
        if e.finished:
            self.final = e
        return e

    def cancel(self):
        _call("sampan_request_cancel", self.handle)

    def result(self):
        """Iterates to the end; returns self."""
        for _ in self:
            pass
        return self


class Engine(_Handle):
    """A generation engine (sampan_engine_*), shareable by threads."""
    _destroy = "sampan_engine_destroy"

    def __init__(self, config):
        h = ctypes.c_void_p()
        _call("sampan_engine_create", config.handle, ctypes.byref(h))
        super().__init__(h)

    @property
    def vocab_size(self):
        out = ctypes.c_int64()
        _call("sampan_engine_get_vocab_size", self.handle, ctypes.byref(out))
        return out.value

    @property
    def max_model_len(self):
        out = ctypes.c_int64()
        _call("sampan_engine_get_max_model_len", self.handle, ctypes.byref(out))
        return out.value

    def tokenize(self, text, add_special=True):
        n = ctypes.c_int64()
        raw = text.encode()
        _call("sampan_engine_tokenize", self.handle, raw, int(add_special), None, 0,
              ctypes.byref(n))
        ids = (ctypes.c_int32 * max(n.value, 1))()
        _call("sampan_engine_tokenize", self.handle, raw, int(add_special), ids, n.value,
              ctypes.byref(n))
        return [ids[i] for i in range(n.value)]

    def generate(self, prompt, max_tokens=16, temperature=1.0, top_k=0, top_p=1.0, seed=None,
                 stop=(), ignore_eos=False, poll_timeout_ms=-1, lora=None, logit_bias=None,
                 json_object=False, json_schema=None, prompt_logprobs=False):
        """Submits `prompt` (text, or a sequence of token ids) and returns a Generation to
        iterate. lora: the name of an adapter of the engine's config (None: the base model).
        logit_bias: {token id: bias in [-100, 100]} added to those logits (OpenAI's).
        json_object: JSON mode, the output is one JSON object (a prefix if max_tokens cuts it).
        json_schema: a JSON Schema (a dict, or its JSON text); the output is a value it admits
        (a prefix if max_tokens cuts it). Not with json_object.
        prompt_logprobs: the first Event's prompt_logprobs score every prompt token after the
        first (its log-probability given the tokens before it); Generation.prompt_logprobs
        holds them once iterated."""
        params = ctypes.c_void_p()
        _call("sampan_params_create", ctypes.byref(params))
        try:
            _call("sampan_params_set_temperature", params, float(temperature))
            _call("sampan_params_set_top_k", params, int(top_k))
            _call("sampan_params_set_top_p", params, float(top_p))
            if seed is not None:
                _call("sampan_params_set_seed", params, int(seed))
            _call("sampan_params_set_max_tokens", params, int(max_tokens))
            for s in stop:
                _call("sampan_params_add_stop", params, s.encode())
            _call("sampan_params_set_ignore_eos", params, int(bool(ignore_eos)))
            if json_object and json_schema is not None:
                raise SampanError(INVALID_ARGUMENT, "json_schema: not with json_object")
            if json_object:
                _call("sampan_params_set_json_object", params, 1)
            if json_schema is not None:
                text = json_schema if isinstance(json_schema, str) else json.dumps(json_schema)
                _call("sampan_params_set_json_schema", params, text.encode())
            for tid, bias in (logit_bias or {}).items():
                tid = int(tid)
                if not -2**31 <= tid < 2**31:
                    raise SampanError(INVALID_ARGUMENT, "logit_bias: token ids must fit in int32")
                _call("sampan_params_add_logit_bias", params, tid, float(bias))
            if lora is not None:
                _call("sampan_params_set_lora", params, str(lora).encode())
            if prompt_logprobs:
                _call("sampan_params_set_prompt_logprobs", params, 1)
            req = ctypes.c_void_p()
            if isinstance(prompt, str):
                _call("sampan_engine_submit_text", self.handle, prompt.encode(), params,
                      _NO_CALLBACK, None, ctypes.byref(req))
            else:
                ids = np.ascontiguousarray(np.asarray(prompt, dtype=np.int64))
                if ids.size and (ids.min() < -2**31 or ids.max() >= 2**31):
                    raise SampanError(INVALID_ARGUMENT, "token ids must fit in int32")
                arr = (ctypes.c_int32 * max(ids.size, 1))(*[int(x) for x in ids.ravel()])
                _call("sampan_engine_submit_tokens", self.handle, arr, ids.size, params,
                      _NO_CALLBACK, None, ctypes.byref(req))
            return Generation(req, poll_timeout_ms)
        finally:
            _call("sampan_params_destroy", params)
