"""Every tokenizer.ggml.pre type llama.cpp knows, read from GGUF metadata.

For each type a small GGUF byte-level BPE tokenizer is written with the `gguf` package and
`sampan tokenize --split` (the pre-tokenized pieces, as raw UTF-8) is compared with Python's
`regex` module applying that family's published split patterns, held here independently of the
engine's table, on texts in many scripts, emoji, digit runs, whitespace runs, code and
contractions. For a few types the ids of a GGUF carrying GPT-2's vocabulary and merges are
compared with HF `tokenizers` running an equivalent tokenizer.json (same Split patterns). An
unknown type must fail with one line naming the file and the type.
"""
import copy
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as U  # noqa: E402

import regex  # noqa: E402

# --- Published patterns (as the families' tokenizer.json / tiktoken definitions write them) ---

CONTR = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN35 = (CONTR + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
JAIS2 = (CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
         + "".join(rf"|\s{{{n}}}(?!\S)" for n in (512, 256, 128, 64, 32, 16, 8, 4)) + r"|\s{1,2}(?!\S)|\s{1}")
SEED = CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"
BAILING = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"
UFAKZEKA = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
EXAONE_MOE = (CONTR + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?"
              r"|\s*[\r\n]|\s+(?!\S)|\s+")
MINICPM5 = CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
UP = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
LO = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{UP}*{LO}+|[^\r\n\p{{L}}\p{{N}}]?{UP}+{LO}*"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{UP}*{LO}+{CONTR}?|[^\r\n\p{{L}}\p{{N}}]?{UP}+{LO}*{CONTR}?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Kimi K2's tiktoken pattern, with its class intersections (regex.V1 syntax, as published).
KIMI = (r"[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*"
        r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
        r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+"
        r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
        r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DSV3_CJK = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
DSV3_WORDS = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
              r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPARK_WORDS = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
               r"| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+")
CODER_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
BLOOM = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
YOUTU_CJK = ("[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c"
             "\u3001-\u303f\ufe30-\ufe4f]+|[\u3105-\u312f]+|[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+")
YOUTU_WORDS = (rf"[^\r\n\p{{L}}\p{{N}}]?{UP}*{LO}+{CONTR}?|[^\r\n\p{{L}}\p{{N}}]?{UP}+{LO}*{CONTR}?"
               r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
AFMOE_ASIAN = ("[\u4e00-\u9fff\u3400-\u4dbf\uf900-\ufaff\u3040-\u309f\u30a0-\u30ff\uff65-\uff9f\u2f00-\u2fdf"
               "\u0e40-\u0e7f\u0e80-\u0eff\u1780-\u17ff\u1000-\u109f\uaa60-\uaa7f\ua9e0-\ua9ff\uac00-\ud7af"
               "\u1100-\u11ff]+")
# DeepSeek LLM's letter class, as code point ranges.
DS_LETTER_RANGES = [
    (0x41, 0x5A), (0x61, 0x7A), (0xB5, 0xB5), (0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x1BA), (0x1BC, 0x1BF),
    (0x1C4, 0x293), (0x295, 0x2AF), (0x370, 0x373), (0x376, 0x377), (0x37B, 0x37D), (0x37F, 0x37F),
    (0x386, 0x386), (0x388, 0x38A), (0x38C, 0x38C), (0x38E, 0x3A1), (0x3A3, 0x3F5), (0x3F7, 0x481),
    (0x48A, 0x52F), (0x531, 0x556), (0x10A0, 0x10C5), (0x13A0, 0x13F5), (0x13F8, 0x13FD), (0x1C90, 0x1CBA),
    (0x1CBD, 0x1CBF), (0x1D00, 0x1D2B), (0x1D6B, 0x1D77), (0x1D79, 0x1D9A), (0x1E00, 0x1F15),
    (0x1F18, 0x1F1D), (0x1F20, 0x1F45), (0x1F48, 0x1F4D), (0x1F50, 0x1F57), (0x1F59, 0x1F59),
    (0x1F5B, 0x1F5B), (0x1F5D, 0x1F5D), (0x1F5F, 0x1F7D), (0x1F80, 0x1FB4), (0x1FB6, 0x1FBC),
    (0x1FBE, 0x1FBE), (0x1FC2, 0x1FC4), (0x1FC6, 0x1FCC), (0x1FD0, 0x1FD3), (0x1FD6, 0x1FDB),
    (0x1FE0, 0x1FEC), (0x1FF2, 0x1FF4), (0x1FF6, 0x1FFC), (0x2102, 0x2102), (0x2107, 0x2107),
    (0x210A, 0x2113), (0x2115, 0x2115), (0x2119, 0x211D), (0x2124, 0x2124), (0x2126, 0x2126),
    (0x2128, 0x2128), (0x212A, 0x212D), (0x212F, 0x2134), (0x2139, 0x2139), (0x213C, 0x213F),
    (0x2145, 0x2149), (0x214E, 0x214E), (0x2183, 0x2184), (0x2C00, 0x2C7B), (0x2C7E, 0x2CE4),
    (0x2CEB, 0x2CEE), (0x2CF2, 0x2CF3), (0xA640, 0xA66D), (0xA680, 0xA69B), (0xA722, 0xA76F),
    (0xA771, 0xA787), (0xA78B, 0xA78E), (0xAB70, 0xABBF), (0xFB00, 0xFB06), (0xFB13, 0xFB17),
    (0xFF21, 0xFF3A), (0xFF41, 0xFF5A), (0x10400, 0x1044F), (0x104B0, 0x104D3), (0x104D8, 0x104FB),
    (0x10C80, 0x10CB2), (0x10CC0, 0x10CF2), (0x118A0, 0x118DF), (0x1E900, 0x1E943)]
DS_LETTERS = r"\s?[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in DS_LETTER_RANGES) + "]+"

# Each family: (names, steps). A step is ("split", pattern) - an Isolated Split - or "gpt2" (GPT-2's
# ByteLevel with use_regex) or "bytes" (ByteLevel without a regex). "falcon", "meta" and "ws" are
# whole pipelines of their own.
FAMILIES = [
    (["default", "gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais", "trillion", "granite-docling", "jina-es",
      "jina-de", "jina-v2-es", "jina-v2-de", "jina-v1-en", "jina-v2-code", "roberta-bpe", "gigachat", "a.x-4.0",
      "mellum", "modern-bert", "exaone4"], ["gpt2"]),
    (["starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"],
     [("split", r"\p{N}"), "gpt2"]),
    (["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano",
      "dbrx", "smaug-bpe", "glm4", "chatglm-bpe", "chatglm4"], [("split", LLAMA3), "bytes"]),
    (["jais-2"], [("split", JAIS2), "bytes"]),
    (["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "hunyuan", "solar-open", "megrez", "grok-2"],
     [("split", QWEN2), "bytes"]),
    (["qwen35"], [("split", QWEN35), "bytes"]),
    (["ufakzeka"], [("split", UFAKZEKA), "bytes"]),
    (["laguna"], [("split", r"[^\n]+|[\n]+"), ("split", QWEN2), "bytes"]),
    (["seed-coder"], [("split", SEED), "bytes"]),
    (["bailingmoe", "bailingmoe2", "llada-moe"], [("split", BAILING), "bytes"]),
    (["exaone-moe"], [("split", EXAONE_MOE), "bytes"]),
    (["minicpm5"], [("split", r"\p{N}{1,3}"), ("split", MINICPM5), "bytes"]),
    (["tekken"], [("split", TEKKEN), "bytes"]),
    (["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2", "granite-embed-multi-97m"], [("split", GPT4O), "bytes"]),
    (["tiny_aya", "cohere2moe"], [("split", r"\d{1,3}(?=(?:\d{3})*\b)"), ("split", GPT4O), "bytes"]),
    (["kimi-k2"], [("split", KIMI), "bytes"]),
    (["deepseek-llm"], [("split", r"[\r\n]"), ("split", DS_LETTERS),
                        ("split", "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"),
                        ("split", r"\s+$"), ("split", CODER_CJK), ("split", r"\p{N}+"), "bytes"]),
    (["deepseek-coder"], [("split", r"[\r\n]"), ("split", r"\s?\p{L}+"), ("split", r"\s?\p{P}+"),
                          ("split", CODER_CJK), ("split", r"\p{N}"), "bytes"]),
    (["deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"],
     [("split", r"\p{N}{1,3}"), ("split", DSV3_CJK), ("split", DSV3_WORDS), "bytes"]),
    (["spark2_5"], [("split", r"\p{N}{1,3}"), ("split", DSV3_CJK), ("split", SPARK_WORDS), ("split", r"\p{N}"),
                    "bytes"]),
    (["youtu"], [("split", YOUTU_CJK), ("split", YOUTU_WORDS), "bytes"]),
    (["afmoe"], [("split", r"\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N}))"), ("split", AFMOE_ASIAN), ("split", DSV3_WORDS),
                 "bytes"]),
    (["falcon"], "falcon"),
    (["poro-chat", "bloom", "gpt3-finnish"], [("split", BLOOM), "bytes"]),
    (["viking"], [("split", BLOOM), ("split", r"\p{N}"), "bytes"]),
    (["chameleon"], [("split", r"<sentinel:[0-9]+>"), ("split", r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z"),
                     ("split", r"([\t\n]|    |  )"), ("split", r"\p{N}"), ("split", r"[\p{P}!-/:-@\[-`{-~]"),
                     "gpt2"]),
    (["superbpe"], [("split", r"\p{N}+"), ("split", r"(?=(\d{3})+(?!\d))"), "bytes"]),
    (["gemma4", "granite-embed-multi-311m", "sarvam-moe"], "meta"),
    (["whitespace"], "ws"),
]

# Types whose ids are also compared with HF `tokenizers` (byte-level, GPT-2 vocabulary).
ID_TYPES = ["gpt-2", "starcoder", "llama3", "qwen2", "qwen35", "jais-2", "seed-coder", "bailingmoe", "exaone-moe",
            "minicpm5", "tekken", "gpt-4o", "tiny_aya", "kimi-k2", "deepseek-coder", "deepseek-v3", "youtu",
            "afmoe", "falcon", "bloom", "viking", "chameleon", "superbpe", "laguna", "spark2_5", "ufakzeka"]
IGNORE_MERGES = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                 "jina-v5-nano", "minicpm5", "tekken", "granite-embed-multi-97m", "youtu"}

TEXTS = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "I'LL DO IT, you'Re right; she's here, we've won, I'm in, they'd go. DON'T 'S 'Ll 'ſ",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "Γειά σου Κόσμε· ΑΒΓ αβγ ΆΈΉ",
    "你好，世界！我们在2024年去了北京。日本語のテキストとカタカナ、ひらがな。",
    "مرحبا بالعالم، كيف حالك؟ ١٢٣٤٥ ۔",
    "नमस्ते दुनिया। हिन्दी पाठ १२३४ क्षत्रिय",
    "สวัสดีครับ ภาษาไทย ๑๒๓",
    "안녕하세요 세계! 한국어 텍스트 ㄱㄴㄷ",
    "emoji 😀👍🏽 family 👨\u200d👩\u200d👧\u200d👦 flag 🇫🇷 heart ❤️ keycap 1️⃣",
    "1 12 123 1234 12345 123456 1234567 12345678 123456789 1234567890 3.14159 1,000,000",
    "x²+y³=z¹ ½ ¼ ¾ Ⅻ ⑦",
    "   leading spaces and trailing   ",
    "tabs\tand\t\ttabs \t mixed\r\nwindows\r\n\r\nlines\n\n\nunix\x85nel\x0bvt\x0cff\u00a0nbsp\u00a0\u00a0x\u3000ideo\u2009thin",
    "def foo(x):\n    return x ** 2  # comment\n\tif (a&&b||c) { y = [1, 2]; }",
    "camelCaseWords HTTPServer getHTTPResponseCode XMLHttpRequest iPhone McDonald's O'Neil",
    "path/to/file.txt https://example.com/a?b=c&d=e user@mail.org",
    "Ünïcödé café naïve résumé e\u0301 a\u0308 Ω Å",
    "<sentinel:12> IMGIMGABCZ  two  spaces    four",
    "...!!! ??? ,,, — – … 。，、 «quotes» “curly” ‘single’",
    "mixed中文English한국어日本語123abc",
    "$100 + 5% = <tag> ^caret~ |pipe| `tick`",
    "",
    " ",
    "\n",
]


def split_isolated(pieces, pattern, flags=0):
    out = []
    for p in pieces:
        pos = 0
        for m in regex.finditer(pattern, p, flags=flags):
            if m.start() > pos:
                out.append(p[pos:m.start()])
            out.append(m.group(0))
            pos = m.end()
        if pos < len(p):
            out.append(p[pos:])
    return [x for x in out if x]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


B2U = bytes_to_unicode()
U2B = {v: k for k, v in B2U.items()}
PUNCT = r"[\p{P}!-/:-@\[-`{-~]+"


def expected_pieces(steps, text):
    if steps == "meta":
        return split_isolated([text.replace(" ", "\u2581")], r"[^\n]+|[\n]+")
    if steps == "ws":
        return [w for w in regex.split(r"\s+", text) if w]
    if steps == "falcon":
        # Punctuation runs, GPT-2 words, then (in byte-level characters) digit runs and 3-digit groups.
        pieces = split_isolated(split_isolated([text], PUNCT), GPT2)
        mapped = ["".join(B2U[b] for b in p.encode()) for p in pieces]
        mapped = split_isolated(split_isolated(mapped, r"\p{N}+"), r"[0-9][0-9][0-9]")
        return [bytes(U2B[c] for c in p).decode("utf-8", errors="replace") for p in mapped]
    pieces = [text] if text else []
    for st in steps:
        if st == "gpt2":
            pieces = split_isolated(pieces, GPT2)
        elif st == "bytes":
            pass
        else:
            flags = regex.V1 if "&&" in st[1] else 0
            pieces = split_isolated(pieces, st[1], flags)
    return pieces


def write_gguf(path, pre, tokens, merges, types=None):
    import gguf
    w = gguf.GGUFWriter(path, "gpt2")
    w.add_tokenizer_model("gpt2")
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    if types is not None:
        w.add_token_types(types)
    w.add_token_merges(merges)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


def llama_vocab_writer(path):
    """A GGUFWriter for a vocabulary-only file llama.cpp loads: architecture llama with the
    hyper-parameters it reads."""
    import gguf
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(8)
    w.add_head_count(1)
    w.add_layer_norm_rms_eps(1e-5)
    return w


# Types llama.cpp refuses to load: chatglm4 from a vocabulary-only file (it wants tokens these
# small files lack); "gpt2" is not a name llama.cpp knows (Sampan reads it as "gpt-2").
LLAMA_CPP_REFUSES = {"chatglm4", "gpt2"}


def write_llama_vocab(path, pre, tokens, merges, add_bos):
    """A vocabulary-only GGUF llama.cpp loads (architecture llama, the hyper-parameters it reads),
    with BOS 0, EOS 1, SEP 2 marked as control tokens."""
    w = llama_vocab_writer(path)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3))
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_sep_token_id(2)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


def write_gemma4_vocab(path, pre):
    """tokenizer.ggml.model gemma4: letters, U+2581, a few merged pieces, the 256 byte tokens."""
    w = llama_vocab_writer(path)
    w.add_tokenizer_model("gemma4")
    if pre is not None:
        w.add_tokenizer_pre(pre)
    tokens = (["<s>", "</s>", "<pad>"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] +
              ["\u2581", "ab", "\n", "\t", "\u2581\u2581", "\n\n", "\u2581w"] +
              [f"<0x{b:02X}>" for b in range(256)])
    w.add_token_list(tokens)
    w.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3 - 256) + [6] * 256)
    w.add_token_merges(["a b", "\u2581 \u2581", "\n \n", "\u2581 w"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


def hf_json(base, steps, ignore_merges):
    t = copy.deepcopy(base)
    t["model"]["ignore_merges"] = ignore_merges
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    if steps == "falcon":
        pre = [{"type": "Punctuation", "behavior": "Contiguous"}, dict(bl, use_regex=True),
               {"type": "Digits", "individual_digits": False},
               {"type": "Split", "pattern": {"Regex": "[0-9][0-9][0-9]"}, "behavior": "Isolated", "invert": False}]
    else:
        pre = []
        for st in steps:
            if st == "gpt2":
                pre.append(dict(bl, use_regex=True))
            elif st == "bytes":
                pre.append(bl)
            else:
                pre.append({"type": "Split", "pattern": {"Regex": st[1]}, "behavior": "Isolated", "invert": False})
    t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": pre}
    return t


def run_lines(args, argv, n):
    r = U.run_sampan(args, argv)
    lines = r.stdout.split("\n") if r.returncode == 0 else []
    ok = len(lines) == n + 1 and lines[-1] == ""
    return r, (lines[:n] if ok else None)


def main():
    args = U.parse_args(__doc__)
    res = U.Results()
    U.require_binary(args, res)

    base = json.load(open(os.path.join(args.source_dir, "tests", "data", "tokenizers", "gpt-2", "tokenizer.json"),
                          encoding="utf-8"))
    by_id = sorted(base["model"]["vocab"].items(), key=lambda kv: kv[1])
    assert [i for _, i in by_id] == list(range(len(by_id)))
    gpt2_tokens = [t for t, _ in by_id]
    gpt2_merges = [" ".join(m) if isinstance(m, list) else m for m in base["model"]["merges"]]
    gpt2_types = [1] * len(gpt2_tokens)
    gpt2_types[base["added_tokens"][0]["id"]] = 3
    # The split checks need no real vocabulary: the 256 byte characters and one merge.
    small_tokens = [B2U[b] for b in range(256)] + ["\u0120t"]
    small_merges = ["\u0120 t"]

    texts = [t for t in TEXTS if t]
    names = [n for names, _ in FAMILIES for n in names]
    res.check("pre-tokenizer types covered", len(names) == len(set(names)) and len(names) >= 90,
              f"{len(names)} names")
    for names_, steps in FAMILIES:
        for name in names_:
            path = os.path.join(args.work_dir, f"pre-{name}.gguf")
            write_gguf(path, name, small_tokens, small_merges)
            argv = ["tokenize", "--tokenizer", path, "--split"]
            for t in TEXTS:
                argv += ["--text", t]
            r, lines = run_lines(args, argv, len(TEXTS))
            if not res.check(f"{name}: --split runs", lines is not None, "" if lines else r.describe()):
                continue
            bad = []
            for text, line in zip(TEXTS, lines):
                want = expected_pieces(steps, text)
                got = json.loads(line)
                if got != want:
                    bad.append(f"{text[:30]!r}: sampan {got[:12]} vs regex {want[:12]}")
            res.check(f"{name}: pieces of {len(TEXTS)} texts", not bad, "; ".join(bad[:2]))

    # Ids: the GGUF reader's pipeline against HF tokenizers given the same Split patterns.
    from tokenizers import Tokenizer
    fam = {n: steps for names_, steps in FAMILIES for n in names_}
    id_texts = texts + ["before<|endoftext|>after", "I'm here<|endoftext|> 123"]
    for name in ID_TYPES:
        path = os.path.join(args.work_dir, f"ids-{name}.gguf")
        write_gguf(path, name, gpt2_tokens, gpt2_merges, gpt2_types)
        jpath = os.path.join(args.work_dir, f"ids-{name}.json")
        with open(jpath, "w", encoding="utf-8") as f:
            json.dump(hf_json(base, fam[name], name in IGNORE_MERGES), f, ensure_ascii=False)
        hf = Tokenizer.from_file(jpath)
        argv = ["tokenize", "--tokenizer", path]
        for t in id_texts:
            argv += ["--text", t]
        r, lines = run_lines(args, argv, len(id_texts))
        if not res.check(f"{name}: ids run", lines is not None, "" if lines else r.describe()):
            continue
        bad = []
        for text, line in zip(id_texts, lines):
            want = hf.encode(text, add_special_tokens=False).ids
            got = [int(x) for x in line.split()]
            if got != want:
                bad.append(f"{text[:30]!r}: sampan {got[:16]} vs HF {want[:16]}")
        res.check(f"{name}: ids equal HF tokenizers on {len(id_texts)} texts", not bad, "; ".join(bad[:2]))

    # Special tokens: llama.cpp itself (llama-cpp-python) tokenizes a vocabulary-only GGUF of every
    # type with add_special, with tokenizer.ggml.add_bos_token absent (its per-type default), true
    # and false; `sampan tokenize --add-special` must add the same BOS/EOS/SEP.
    import llama_cpp
    bos_texts = ["ab c", "hello world"]
    mismatched = []
    for name in names:
        if name in LLAMA_CPP_REFUSES:
            continue
        for add_bos in (None, True, False):
            path = os.path.join(args.work_dir, "bos.gguf")
            write_llama_vocab(path, name, small_tokens, small_merges, add_bos)
            try:
                ref = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
                want = [ref.tokenize(t.encode(), add_bos=True, special=True) for t in bos_texts]
                del ref
            except Exception as e:  # llama.cpp refusing a type we accept is a finding, not a pass
                mismatched.append(f"{name}: llama.cpp refused the file: {e}")
                continue
            argv = ["tokenize", "--tokenizer", path, "--add-special"]
            for t in bos_texts:
                argv += ["--text", t]
            r, lines = run_lines(args, argv, len(bos_texts))
            got = [[int(x) for x in ln.split()] for ln in lines] if lines else None
            if got != want:
                mismatched.append(f"{name} add_bos_token={add_bos}: sampan {got} vs llama.cpp {want}")
    res.check(f"BOS/EOS with --add-special == llama.cpp for {len(names) - len(LLAMA_CPP_REFUSES)} types "
              "x add_bos_token absent/true/false", not mismatched, "; ".join(mismatched[:3]))

    # tokenizer.ggml.model "gemma4" (BPE over raw UTF-8, spaces as U+2581, byte fallback), whatever
    # tokenizer.ggml.pre says, against llama.cpp.
    g_texts = ["ab c", "hello  world\n\nab\tc", " leading", "a\nb\n", "x y z  ", "caf\u00e9 \U0001F600 w"]
    for pre in (None, "gemma4", "llama-bpe"):
        path = os.path.join(args.work_dir, "gemma4-model.gguf")
        write_gemma4_vocab(path, pre)
        ref = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        want = [ref.tokenize(t.encode(), add_bos=True, special=True) for t in g_texts]
        del ref
        argv = ["tokenize", "--tokenizer", path, "--add-special"]
        for t in g_texts:
            argv += ["--text", t]
        r, lines = run_lines(args, argv, len(g_texts))
        got = [[int(x) for x in ln.split()] for ln in lines] if lines else r.describe()
        res.check(f"tokenizer model gemma4 (pre {pre}) == llama.cpp on {len(g_texts)} texts", got == want,
                  f"sampan {got} vs llama.cpp {want}" if got != want else "")

    # An unknown type: one line naming the file and the type, non-zero exit.
    path = os.path.join(args.work_dir, "pre-unknown.gguf")
    write_gguf(path, "no-such-pre", small_tokens, small_merges)
    r = U.run_sampan(args, ["tokenize", "--tokenizer", path, "--text", "hi"])
    err = r.stderr.strip()
    res.check("unknown type: non-zero exit", r.returncode not in (0, None), r.describe())
    res.check("unknown type: one line naming file and type",
              len(err.splitlines()) == 1 and path in err and "'no-such-pre'" in err and r.stdout == "",
              repr(err))
    res.finish()


if __name__ == "__main__":
    main()
