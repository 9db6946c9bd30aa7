"""Writes tests/data/tokenizers/<name>/{tokenizer.json,tokenizer_config.json,...} from the GGUF
vocabulary fixtures in ../shared/fixtures/tokenizers, using transformers' GGUF conversion.
Run once with the reference venv: /work/refenv/bin/python tests/reference/make_tokenizer_jsons.py
"""
import json
import os
import sys

from transformers import AutoTokenizer

# transformers' GGUF converter gives every gpt2-model vocabulary GPT-2's pre-tokenizer; DeepSeek
# LLM and Falcon ship their own (as published in their tokenizer.json files).
DEEPSEEK_LETTER_RANGES = (
    "0041-005A 0061-007A 00B5 00C0-00D6 00D8-00F6 00F8-01BA 01BC-01BF 01C4-0293 0295-02AF "
    "0370-0373 0376 0377 037B-037D 037F 0386 0388-038A 038C 038E-03A1 03A3-03F5 03F7-0481 "
    "048A-052F 0531-0556 10A0-10C5 13A0-13F5 13F8-13FD 1C90-1CBA 1CBD-1CBF 1D00-1D2B 1D6B-1D77 "
    "1D79-1D9A 1E00-1F15 1F18-1F1D 1F20-1F45 1F48-1F4D 1F50-1F57 1F59 1F5B 1F5D 1F5F-1F7D "
    "1F80-1FB4 1FB6-1FBC 1FBE 1FC2-1FC4 1FC6-1FCC 1FD0-1FD3 1FD6-1FDB 1FE0-1FEC 1FF2-1FF4 "
    "1FF6-1FFC 2102 2107 210A-2113 2115 2119-211D 2124 2126 2128 212A-212D 212F-2134 2139 "
    "213C-213F 2145-2149 214E 2183 2184 2C00-2C7B 2C7E-2CE4 2CEB-2CEE 2CF2 2CF3 A640-A66D "
    "A680-A69B A722-A76F A771-A787 A78B-A78E AB70-ABBF FB00-FB06 FB13-FB17 FF21-FF3A FF41-FF5A "
    "10400-1044F 104B0-104D3 104D8-104FB 10C80-10CB2 10CC0-10CF2 118A0-118DF 1E900-1E943")


def char_class(ranges: str) -> str:
    out = []
    for r in ranges.split():
        a, _, b = r.partition("-")
        out.append(chr(int(a, 16)) + ("-" + chr(int(b, 16)) if b else ""))
    return "".join(out)


def split(regex: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


def byte_level(use_regex: bool) -> dict:
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


PRE_TOKENIZERS = {
    "deepseek-llm": {"type": "Sequence", "pretokenizers": [
        split("[\r\n]"),
        split("\\s?[" + char_class(DEEPSEEK_LETTER_RANGES) + "]+"),
        split("\\s?[!-/:-~" + char_class("FF01-FF0F FF1A-FF5E 2018-201F 3000-3002") + "]+"),
        split("\\s+$"),
        split("[" + char_class("4E00-9FA5 0800-4E00 AC00-D7FF") + "]+"),
        split("\\p{N}+"),
        byte_level(False)]},
    "falcon": {"type": "Sequence", "pretokenizers": [
        {"type": "Punctuation", "behavior": "Contiguous"},
        byte_level(True),
        {"type": "Digits", "individual_digits": False},
        split("[0-9][0-9][0-9]")]},
}


def make_bert(gguf_path: str, out: str) -> None:
    """transformers cannot convert a GGUF BERT vocabulary: build its WordPiece tokenizer.json."""
    import gguf
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    r = gguf.GGUFReader(gguf_path)
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    vocab = {}
    for i, t in enumerate(tokens):  # llama.cpp writes "▁word" and "ing" for "word" and "##ing"
        if t.startswith("\u2581"):
            t = t[1:]
        elif not (len(t) > 2 and t[0] == "[" and t[-1] == "]"):
            t = "##" + t
        vocab[t] = i
    tok = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    tok.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"cls_token": "[CLS]", "sep_token": "[SEP]", "unk_token": "[UNK]", "pad_token": "[PAD]",
                   "mask_token": "[MASK]", "do_lower_case": True}, f, indent=2)

NAMES = ["gpt-2", "llama-spm", "phi-3", "bert-bge", "deepseek-llm", "falcon"]


def main() -> int:
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    fixtures = os.path.join(repo, "..", "shared", "fixtures", "tokenizers")
    out_root = os.path.join(repo, "tests", "data", "tokenizers")
    for name in NAMES:
        gguf = f"ggml-vocab-{name}.gguf"
        out = os.path.join(out_root, name)
        if name == "bert-bge":
            make_bert(os.path.join(fixtures, gguf), out)
            print(f"{name}: WordPiece -> {out}")
            continue
        try:
            tok = AutoTokenizer.from_pretrained(fixtures, gguf_file=gguf)
        except Exception as e:  # report and continue: one family failing should not hide others
            print(f"{name}: conversion failed: {e}", file=sys.stderr)
            continue
        os.makedirs(out, exist_ok=True)
        tok.save_pretrained(out)
        if name in PRE_TOKENIZERS:
            path = os.path.join(out, "tokenizer.json")
            with open(path, encoding="utf-8") as f:
                j = json.load(f)
            j["pre_tokenizer"] = PRE_TOKENIZERS[name]
            with open(path, "w", encoding="utf-8") as f:
                json.dump(j, f, ensure_ascii=False, indent=2)
        print(f"{name}: {type(tok).__name__} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
