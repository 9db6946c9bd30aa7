"""Minimal safetensors reader/writer in pure numpy (no `safetensors` package needed).

File layout (https://huggingface.co/docs/safetensors): an 8-byte little-endian u64 N, N bytes of
UTF-8 JSON header {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
then the data section; offsets are relative to the start of the data section.

bfloat16 has no numpy dtype: it is carried as uint16 bit patterns. `load_file` decodes BF16 to
float32 unless raw=True; `save_file` encodes float arrays to BF16 with round-to-nearest-even.
"""

import json
import struct

import numpy as np

# safetensors dtype string -> numpy dtype of one element as stored (BF16 as its raw bits).
_STORAGE_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}

_NUMPY_TO_NAME = {
    np.dtype("float64"): "F64",
    np.dtype("float32"): "F32",
    np.dtype("float16"): "F16",
    np.dtype("int64"): "I64",
    np.dtype("int32"): "I32",
    np.dtype("int16"): "I16",
    np.dtype("int8"): "I8",
    np.dtype("uint8"): "U8",
    np.dtype("bool"): "BOOL",
}


def float_to_bf16_bits(x):
    """float array -> uint16 bfloat16 bit patterns, round-to-nearest-even; NaN stays a quiet NaN."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    bits = f.view(np.uint32)
    # Adding 0x7FFF plus the lowest kept bit rounds half-way cases to the even neighbour.
    lsb = (bits >> np.uint32(16)) & np.uint32(1)
    rounded = (bits + np.uint32(0x7FFF) + lsb) >> np.uint32(16)
    out = rounded.astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        out[nan] = ((bits[nan] >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return out


def bf16_bits_to_float(bits):
    """uint16 bfloat16 bit patterns -> float32 (exact)."""
    b = np.ascontiguousarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


def read_header(path):
    """Returns (header dict without __metadata__, metadata dict, byte offset of the data section)."""
    with open(path, "rb") as f:
        raw_len = f.read(8)
        if len(raw_len) != 8:
            raise ValueError(f"{path}: file shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", raw_len)
        text = f.read(n)
        if len(text) != n:
            raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(text.decode("utf-8"))
    metadata = header.pop("__metadata__", {}) or {}
    return header, metadata, 8 + n


def tensor_nbytes(dtype_name, shape):
    count = 1
    for d in shape:
        count *= int(d)
    return count * _STORAGE_DTYPES[dtype_name].itemsize


def load_file(path, raw=False):
    """Reads every tensor of one .safetensors file into a dict name -> numpy array.

    BF16 tensors come back as float32 (exact), or as uint16 bits when raw=True.
    """
    header, _, data_start = read_header(path)
    with open(path, "rb") as f:
        blob = f.read()
    out = {}
    for name, info in header.items():
        dt = _STORAGE_DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        shape = tuple(int(d) for d in info["shape"])
        if end - begin != tensor_nbytes(info["dtype"], shape):
            raise ValueError(f"{path}: tensor {name}: byte range does not match shape/dtype")
        arr = np.frombuffer(blob, dtype=dt, count=(end - begin) // dt.itemsize,
                            offset=data_start + begin).reshape(shape).copy()
        if info["dtype"] == "BF16" and not raw:
            arr = bf16_bits_to_float(arr).reshape(shape)
        out[name] = arr
    return out


def build_header(specs, metadata=None):
    """specs: list of (name, dtype_name, shape) in file order -> (header bytes incl. length, data size).

    The JSON is padded with spaces to a multiple of 8 bytes so the data section is 8-aligned, as
    the reference writer does.
    """
    header = {}
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, dtype_name, shape in specs:
        nbytes = tensor_nbytes(dtype_name, shape)
        header[name] = {"dtype": dtype_name, "shape": [int(d) for d in shape],
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text, offset


def encode(arr, dtype_name):
    """numpy array -> little-endian bytes in the given safetensors dtype."""
    if dtype_name == "BF16":
        if arr.dtype == np.uint16:
            return np.ascontiguousarray(arr).astype("<u2").tobytes()
        return float_to_bf16_bits(arr).astype("<u2").tobytes()
    return np.ascontiguousarray(arr, dtype=_STORAGE_DTYPES[dtype_name]).tobytes()


def save_file(tensors, path, dtypes=None, metadata=None):
    """Writes tensors (dict name -> array, kept in insertion order) to one .safetensors file.

    dtypes: optional dict name -> safetensors dtype string ("BF16", "F16", ...); defaults to the
    array's own dtype. metadata defaults to {"format": "pt"} like files written from PyTorch.
    """
    dtypes = dtypes or {}
    if metadata is None:
        metadata = {"format": "pt"}
    specs = []
    for name, arr in tensors.items():
        dt = dtypes.get(name) or _NUMPY_TO_NAME[np.dtype(arr.dtype)]
        specs.append((name, dt, arr.shape))
    head, _ = build_header(specs, metadata)
    with open(path, "wb") as f:
        f.write(head)
        for name, dt, _ in specs:
            f.write(encode(tensors[name], dt))


def load_model_tensors(model_dir, raw=False):
    """All tensors of a HF model directory: model.safetensors or the shards of the index."""
    import os
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        out = {}
        for shard in sorted(set(weight_map.values())):
            out.update(load_file(os.path.join(model_dir, shard), raw=raw))
        missing = set(weight_map) - set(out)
        if missing:
            raise ValueError(f"{index}: tensors listed but not found in shards: {sorted(missing)}")
        return out
    return load_file(os.path.join(model_dir, "model.safetensors"), raw=raw)
