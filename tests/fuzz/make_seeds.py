#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/seed-*): small valid inputs
of each format, so that libFuzzer starts from inputs that reach deep into each parser. Crash
inputs found later are added beside them by hand (named crash-*), never rewritten by this script.

Usage: make_seeds.py [--out tests/fuzz/corpus]   (deterministic; rerun after a format change)
"""
import argparse
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))


def write(out, target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors_bytes(tensors, metadata=None):
    header, blobs, off = {}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def gguf_bytes(kvs):
    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b
    out = b"GGUF" + struct.pack("<I", 3) + struct.pack("<Q", 0) + struct.pack("<Q", len(kvs))
    for key, (t, v) in kvs.items():
        out += s(key) + struct.pack("<I", t)
        if t == 8:
            out += s(v)
        elif t == 4:
            out += struct.pack("<I", v)
        elif t == 6:
            out += struct.pack("<f", v)
        elif t == 7:
            out += struct.pack("<B", v)
        elif t == 9:
            et, items = v
            out += struct.pack("<I", et) + struct.pack("<Q", len(items))
            for it in items:
                out += s(it) if et == 8 else struct.pack({5: "<i", 6: "<f"}[et], it)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "corpus"))
    out = ap.parse_args().out

    # safetensors + config.json
    write(out, "safetensors", "two-tensors", safetensors_bytes({
        "a": ("F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
        "b": ("BF16", [3], b"\x80\x3f\x00\x40\x40\x40"),
        "empty": ("I8", [0, 5], b"")}, {"format": "pt"}))
    for m in ("tiny_llama3", "tiny_qwen2", "tiny_mistral"):
        with open(os.path.join(REPO, "tests", "data", "models", m, "config.json"), "rb") as f:
            write(out, "safetensors", f"config-{m}", f.read())

    # GGUF: every value type the reader knows, and a small SentencePiece-style vocabulary.
    tokens = ["<unk>", "<s>", "</s>", "\u2581a", "\u2581b", "ab", "<0x41>"]
    write(out, "gguf", "vocab", gguf_bytes({
        "general.architecture": (8, "llama"),
        "llama.context_length": (4, 128),
        "llama.rope.freq_base": (6, 10000.0),
        "tokenizer.ggml.model": (8, "llama"),
        "tokenizer.ggml.tokens": (9, (8, tokens)),
        "tokenizer.ggml.scores": (9, (6, [0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0])),
        "tokenizer.ggml.token_type": (9, (5, [2, 3, 3, 1, 1, 1, 6])),
        "tokenizer.ggml.bos_token_id": (4, 1),
        "tokenizer.ggml.eos_token_id": (4, 2),
        "tokenizer.ggml.add_bos_token": (7, 1),
        "tokenizer.chat_template": (8, "{% for m in messages %}{{ m.content }}{% endfor %}")}))

    # tokenizer: mode byte 0 = a tokenizer.json, else text for the real tokenizers.
    bpe = {"version": "1.0", "added_tokens": [{"id": 5, "content": "<|end|>", "special": True,
                                               "single_word": False, "lstrip": False,
                                               "rstrip": False, "normalized": False}],
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                             "use_regex": True},
           "post_processor": None, "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "\u0120ab": 4},
                     "merges": ["a b", "\u0120 ab"]}}
    write(out, "tokenizer", "bpe-json", b"\x00" + json.dumps(bpe).encode())
    wp = {"version": "1.0", "added_tokens": [], "normalizer": {"type": "BertNormalizer",
          "clean_text": True, "handle_chinese_chars": True, "strip_accents": None,
          "lowercase": True}, "pre_tokenizer": {"type": "BertPreTokenizer"},
          "post_processor": None, "decoder": {"type": "WordPiece", "prefix": "##"},
          "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                    "max_input_chars_per_word": 100,
                    "vocab": {"[UNK]": 0, "hello": 1, "##lo": 2, "hel": 3, "world": 4}}}
    write(out, "tokenizer", "wordpiece-json", b"\x00" + json.dumps(wp).encode())
    texts = ["Hello, world! It's 2024-01-01 and  \t spaces\n\nnew lines.",
             "def f(x):\n    return x**2  # code\n", "\u4f60\u597d\uff0c\u4e16\u754c \U0001F600\U0001F44D\u200d",
             "\u00e9t\u00e9 na\u00efve caf\u00e9 \u0645\u0631\u062d\u0628\u0627 \u0928\u092e\u0938\u094d\u0924\u0947",
             "<s>[INST] special tokens </s><|end|>"]
    for i, t in enumerate(texts):
        write(out, "tokenizer", f"text-{i}", bytes([i + 1]) + t.encode())

    # chat templates (the real ones of ../shared/fixtures are an extra corpus directory).
    write(out, "chat_template", "macros", "{% macro f(x) %}[{{ x }}]{% endmacro %}"
          "{% for m in messages %}{{ f(m.role) }}{{ m.content | trim }}{% if loop.last %}!{% endif %}"
          "{% endfor %}{% set ns = namespace(n=0) %}{{ tools | tojson }}\x00"
          + json.dumps({"messages": [{"role": "user", "content": " hi "}], "tools": [{"a": [1, 2]}]}))
    write(out, "chat_template", "filters", "{{ messages | map(attribute='role') | join(',') }}"
          "{{ (messages | length) * 2 }}{{ 'abc'[1:] | upper }}{{ range(3) | list }}"
          "{% if bos_token is defined %}{{ bos_token }}{% endif %}")

    # OpenAI bodies.
    for name, body in {
        "completion": {"model": "m", "prompt": "Hello", "max_tokens": 8, "temperature": 0.5,
                       "top_p": 0.9, "stop": ["\n"], "logprobs": 2, "stream": True,
                       "stream_options": {"include_usage": True}, "seed": 3},
        "completion-ids": {"prompt": [[1, 2, 3]], "logit_bias": {}, "n": 1},
        "completion-batch-echo": {"prompt": [[1, 2, 3], [4, 5]], "echo": True, "logprobs": 1,
                                  "max_tokens": 0},
        "completion-best-of": {"prompt": ["a", "b"], "n": 2, "best_of": 3, "max_tokens": 4},
        "completion-prompt-logprobs": {"prompt": [[1, 2, 3]], "prompt_logprobs": 2,
                                       "echo": True, "logprobs": 1, "max_tokens": 1},
        "completion-guided-regex": {"prompt": "a", "guided_regex": "[a-c]{2,4}-\\d+|x(y|z)*",
                                    "min_tokens": 0, "skip_special_tokens": True},
        "completion-guided-choice": {"prompt": "a", "guided_choice": ["yes", "no", "n\"o"],
                                     "guided_decoding_backend": "xgrammar"},
        "chat-vllm": {"messages": [{"role": "user", "content": "hi"},
                                   {"role": "assistant", "content": "I "}],
                      "add_generation_prompt": False, "continue_final_message": True,
                      "chat_template_kwargs": {"enable_thinking": False},
                      "documents": [{"text": "d"}], "guided_json": {"type": "object"}},
        "chat": {"model": "m", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
             "function": {"name": "f", "arguments": "{\"x\": [1, {\"y\": 2}]}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "42"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "properties": {"x": {"type": "array"}}}}}],
            "tool_choice": "auto", "response_format": {"type": "text"}, "logprobs": True,
            "top_logprobs": 3, "max_completion_tokens": 5}}.items():
        write(out, "openai_request", name, json.dumps(body))

    # KServe REST bodies.
    for name, body in {
        "text": {"id": "r1", "inputs": [
            {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["Hello"]},
            {"name": "max_tokens", "datatype": "INT32", "shape": [1], "data": [4]},
            {"name": "sampling_parameters", "datatype": "BYTES", "shape": [1],
             "data": ["{\"temperature\": 0.5, \"top_k\": 4}"]}],
            "parameters": {"seed": 1}, "outputs": [{"name": "text_output"}]},
        "ids": {"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [1, 3],
                            "data": [[1, 2, 3]]},
                           {"name": "stream", "datatype": "BOOL", "shape": [1], "data": [False]}]},
    }.items():
        write(out, "kserve_json", name, json.dumps(body))

    # KServe gRPC requests: wire bytes of ModelInferRequest messages (classes made by grpc_tools).
    import importlib
    import subprocess
    import sys
    import tempfile
    gen = tempfile.mkdtemp(prefix="sampan-seeds-")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"--proto_path={REPO}",
                    f"--python_out={gen}", os.path.join(REPO, "proto", "grpc_service.proto")],
                   check=True)
    sys.path.insert(0, gen)
    pb = importlib.import_module("proto.grpc_service_pb2")
    r = pb.ModelInferRequest(model_name="m", id="r1")
    t = r.inputs.add(name="text_input", datatype="BYTES", shape=[1])
    t.contents.bytes_contents.append(b"Hello")
    t = r.inputs.add(name="max_tokens", datatype="INT32", shape=[1])
    t.contents.int_contents.append(4)
    t = r.inputs.add(name="sampling_parameters", datatype="BYTES", shape=[1])
    t.contents.bytes_contents.append(b'{"temperature": "0.5", "top_k": 4}')
    r.parameters["seed"].int64_param = 3
    r.outputs.add(name="text_output")
    write(out, "kserve_proto", "typed", r.SerializeToString())
    r = pb.ModelInferRequest(model_name="m")
    r.inputs.add(name="input_ids", datatype="INT64", shape=[1, 3])
    r.inputs.add(name="stream", datatype="BOOL", shape=[1])
    r.inputs.add(name="text_input", datatype="BYTES", shape=[2])
    r.raw_input_contents.append(struct.pack("<3q", 1, 2, 3))
    r.raw_input_contents.append(b"\x01")
    r.raw_input_contents.append(struct.pack("<I", 2) + b"hi" + struct.pack("<I", 0))
    write(out, "kserve_proto", "raw", r.SerializeToString())

    # serve YAML configs: the shipped ones.
    for cfg in ("serve.yaml", "serve-small-cpu.yaml"):
        with open(os.path.join(REPO, "configs", cfg), "rb") as f:
            write(out, "serve_config", cfg.replace(".yaml", ""), f.read())
    write(out, "serve_config", "flat", "threads: 2\nmax-running: 8\nkv-cache-bytes: 64M\n"
          "api-key: [a, b]\nlimits:\n  max_body_bytes: 1024\n")

    # JSON mode's recogniser: objects with every kind of value, escapes and multi-byte UTF-8.
    write(out, "json_grammar", "object",
          '{"a": [1, -0.5e+3, 2E-7, true, false, null], "b": {"c": "x\\"\\\\\\/\\b\\t"}}')
    write(out, "json_grammar", "utf8", '{"\u00e9\u20ac": "\U0001F600\u4e2d", "k": []}'.encode())
    write(out, "json_grammar", "pretty", '{\n  "a": {\n    "b": [\n      {}\n    ]\n  }\n}')

    # JSON Schemas: every supported keyword, recursion through $defs, and the labelled cases'
    # schemas (tests/data/json_schema/cases.json).
    write(out, "json_schema", "person",
          '{"type": "object", "properties": {"name": {"type": "string", "minLength": 1, '
          '"maxLength": 12}, "age": {"type": "integer"}, "tags": {"type": "array", "items": '
          '{"enum": ["a", "b", 3, null]}, "minItems": 1, "maxItems": 3}}, "required": ["name"], '
          '"additionalProperties": false}')
    write(out, "json_schema", "tree",
          '{"$defs": {"n": {"type": "object", "properties": {"v": {"type": ["number", "null"]}, '
          '"kids": {"type": "array", "items": {"$ref": "#/$defs/n"}}}, "required": ["v"]}}, '
          '"$ref": "#/$defs/n"}')
    write(out, "json_schema", "anyof",
          '{"anyOf": [{"type": "string", "maxLength": 3}, {"const": {"k": [1, true]}}, '
          '{"type": "object", "additionalProperties": {"type": "boolean"}}, {"allOf": [true]}]}')
    # Model replies with tool calls, one per format (first byte: format | piece size << 2).
    write(out, "tool_parser", "hermes", b"\x05Let me check.\n<tool_call>\n{\"name\": \"f\", "
          b"\"arguments\": {\"x\": [1, \"a\"]}}\n</tool_call>\n<tool_call>{\"name\": \"g\"}")
    write(out, "tool_parser", "llama3", b"\x0a<|python_tag|>{\"name\": \"f\", \"parameters\": "
          b"{\"s\": \"a;b\"}}; {\"name\": \"g\", \"parameters\": {}}")
    write(out, "tool_parser", "mistral", b"\x0f[TOOL_CALLS][{\"name\": \"f\", \"arguments\": "
          b"{\"k\": null}, \"id\": \"abcdefghi\"}]")
    write(out, "tool_parser", "text", b"\x01Just text, <tool but no call.")
    with open(os.path.join(REPO, "tests", "data", "json_schema", "cases.json"),
              encoding="utf-8") as f:
        for case in json.load(f):
            write(out, "json_schema", "case_" + case["name"], json.dumps(case["schema"]))
    # Patterns (first byte: min length | (max - min) << 4, 0xF0 unbounded): the labelled ones
    # (tests/data/json_schema/patterns.json), bounded and not.
    with open(os.path.join(REPO, "tests", "data", "json_schema", "patterns.json"),
              encoding="utf-8") as f:
        for i, case in enumerate(json.load(f)["patterns"]):
            bounds = b"\xf0" if i % 2 == 0 else bytes([1 | (6 << 4)])
            write(out, "string_pattern", f"p{i:02d}", bounds + case["pattern"].encode())
    write(out, "string_pattern", "date", b"\xf0^[1-9][0-9]{3}-(?:(?:0[13578]|1[02])-"
          b"(?:0[1-9]|[12][0-9]|3[01])|02-(?:0[1-9]|1[0-9]|2[0-8]))$")


if __name__ == "__main__":
    main()
