// GGUF tokenizer metadata -> TokenizerSpec. The pipeline around the vocabulary is described as
// the tokenizer.json of the same family would (pre-tokenizer regexes by tokenizer.ggml.pre) and
// read by the JSON reader, so both sources tokenize identically.
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/loaders/gguf.h"
#include "engine/loaders/json_util.h"
#include "engine/tokenizer/tokenizer_impl.h"

namespace sampan::tok {
namespace {

using json = nlohmann::json;

json split(const std::string& regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}
json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", use_regex}};
}

// DeepSeek LLM's letter class (the scripts it keeps together with an optional leading space),
// as published in its tokenizer.json.
constexpr const char* kDeepseekLetters =
    "\\s?["
    "\\x{0041}-\\x{005A}\\x{0061}-\\x{007A}\\x{00B5}\\x{00C0}-\\x{00D6}"
    "\\x{00D8}-\\x{00F6}\\x{00F8}-\\x{01BA}\\x{01BC}-\\x{01BF}\\x{01C4}-\\x{0293}"
    "\\x{0295}-\\x{02AF}\\x{0370}-\\x{0373}\\x{0376}\\x{0377}\\x{037B}-\\x{037D}"
    "\\x{037F}\\x{0386}\\x{0388}-\\x{038A}\\x{038C}\\x{038E}-\\x{03A1}"
    "\\x{03A3}-\\x{03F5}\\x{03F7}-\\x{0481}\\x{048A}-\\x{052F}\\x{0531}-\\x{0556}"
    "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}"
    "\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}"
    "\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}"
    "\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"
    "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"
    "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}"
    "\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}"
    "\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}"
    "\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}"
    "\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}"
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}"
    "\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}"
    "]+";

json pre_tokenizer_for(const std::string& pre, const std::string& path) {
  if (pre.empty() || pre == "default" || pre == "gpt-2" || pre == "gpt2") return byte_level(true);
  if (pre == "llama-bpe" || pre == "llama3" || pre == "smaug-bpe" || pre == "dbrx") {
    return {{"type", "Sequence"},
            {"pretokenizers",
             {split(R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
              byte_level(false)}}};
  }
  if (pre == "qwen2") {
    return {{"type", "Sequence"},
            {"pretokenizers",
             {split(R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
              byte_level(false)}}};
  }
  if (pre == "deepseek-llm") {
    return {{"type", "Sequence"},
            {"pretokenizers",
             {split("[\r\n]"), split(kDeepseekLetters), split("\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+"),
              split("\\s+$"), split("[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"), split("\\p{N}+"), byte_level(false)}}};
  }
  if (pre == "falcon") {
    return {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Punctuation"}, {"behavior", "Contiguous"}},
              byte_level(true),
              {{"type", "Digits"}, {"individual_digits", false}},
              split("[0-9][0-9][0-9]")}}};
  }
  fail(ErrorCode::kUnsupported, "{}: tokenizer.ggml.pre '{}' is not supported", path, pre);
}

}  // namespace

TokenizerSpec spec_from_gguf(const std::string& path) {
  auto g = gguf::GgufFile::open(path);
  TokenizerSpec spec;
  spec.source = path;
  const std::string model = g->get_string("tokenizer.ggml.model").value_or("");
  SAMPAN_CHECK(!model.empty(), ErrorCode::kInvalidModel, "{}: key 'tokenizer.ggml.model' is missing", path);
  auto tokens = g->get_string_array("tokenizer.ggml.tokens");
  SAMPAN_CHECK(tokens && !tokens->empty(), ErrorCode::kInvalidModel,
               "{}: key 'tokenizer.ggml.tokens' is missing or empty", path);
  const int64_t n = static_cast<int64_t>(tokens->size());
  const auto types = g->get_int_array("tokenizer.ggml.token_type");
  SAMPAN_CHECK(!types || static_cast<int64_t>(types->size()) == n, ErrorCode::kInvalidModel,
               "{}: key 'tokenizer.ggml.token_type' has {} entries for {} tokens", path,
               types ? types->size() : 0, n);
  ModelSpec& m = spec.model;
  m.vocab = std::move(*tokens);
  if (model == "bert") {
    // llama.cpp's converter marks word-initial pieces with "▁" and drops "##" from continuations;
    // restore the WordPiece spelling. Bracketed names ([CLS], [unused0]) stand alone.
    for (std::string& t : m.vocab) {
      if (t.rfind("\xE2\x96\x81", 0) == 0) {
        t.erase(0, 3);
      } else if (!(t.size() > 2 && t.front() == '[' && t.back() == ']')) {
        t.insert(0, "##");
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) m.ids.emplace(m.vocab[i], static_cast<int32_t>(i));

  auto id_key = [&](const char* key) -> std::optional<int32_t> {
    auto v = g->get_int(key);
    if (!v) return std::nullopt;
    // -1 is how some converters write "none"
    if (*v == -1 || *v == 0xFFFFFFFFll) return std::nullopt;
    SAMPAN_CHECK(*v >= 0 && *v < n, ErrorCode::kInvalidModel,
                 "{}: key '{}' = {} is outside the vocabulary of {} tokens", path, key, *v, n);
    return static_cast<int32_t>(*v);
  };
  SpecialTokens& st = spec.special;
  st.bos = id_key("tokenizer.ggml.bos_token_id");
  st.eos = id_key("tokenizer.ggml.eos_token_id");
  st.unk = id_key("tokenizer.ggml.unknown_token_id");
  st.sep = id_key("tokenizer.ggml.seperator_token_id");
  if (!st.sep) st.sep = id_key("tokenizer.ggml.separator_token_id");
  st.pad = id_key("tokenizer.ggml.padding_token_id");
  st.cls = id_key("tokenizer.ggml.cls_token_id");
  st.mask = id_key("tokenizer.ggml.mask_token_id");
  if (auto eot = id_key("tokenizer.ggml.eot_token_id")) st.eos_ids.push_back(*eot);
  spec.chat_template = g->get_string("tokenizer.chat_template").value_or("");

  // Control (3) and user-defined (4) tokens are matched in text before the model, as HF's added
  // tokens are; control ones count as special.
  if (types) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = (*types)[i];
      SAMPAN_CHECK(t >= 0 && t <= 6, ErrorCode::kInvalidModel,
                   "{}: key 'tokenizer.ggml.token_type'[{}] = {} is not a token type", path, i, t);
      if ((t == 3 || t == 4) && !m.vocab[i].empty()) {
        AddedToken a;
        a.content = m.vocab[i];
        a.id = static_cast<int32_t>(i);
        a.special = t == 3;
        spec.added.push_back(std::move(a));
      }
    }
  }

  json pipeline = json::object();
  if (model == "gpt2") {
    m.type = ModelSpec::Type::kBpe;
    auto merges = g->get_string_array("tokenizer.ggml.merges");
    SAMPAN_CHECK(merges.has_value(), ErrorCode::kInvalidModel, "{}: key 'tokenizer.ggml.merges' is missing", path);
    for (size_t r = 0; r < merges->size(); ++r) {
      const std::string& s = (*merges)[r];
      const size_t sp = s.find(' ', 1);
      SAMPAN_CHECK(sp != std::string::npos, ErrorCode::kInvalidModel,
                   "{}: key 'tokenizer.ggml.merges'[{}] ('{}') is not two tokens", path, r, printable(s));
      add_merge(m, s.substr(0, sp), s.substr(sp + 1), static_cast<int32_t>(r), path,
                fmt::format("key 'tokenizer.ggml.merges'[{}]", r));
    }
    pipeline["pre_tokenizer"] = pre_tokenizer_for(g->get_string("tokenizer.ggml.pre").value_or(""), path);
    pipeline["decoder"] = {{"type", "ByteLevel"}};
    spec.kind = TokenizerKind::kByteLevelBpe;
    st.add_bos = g->get_bool("tokenizer.ggml.add_bos_token").value_or(false);
  } else if (model == "llama") {
    m.type = ModelSpec::Type::kSpmScores;
    m.byte_fallback = true;
    auto scores = g->get_f32_array("tokenizer.ggml.scores");
    SAMPAN_CHECK(scores && static_cast<int64_t>(scores->size()) == n, ErrorCode::kInvalidModel,
                 "{}: key 'tokenizer.ggml.scores' is missing or has {} entries for {} tokens", path,
                 scores ? scores->size() : 0, n);
    m.scores = std::move(*scores);
    m.unk = st.unk;
    if (g->get_bool("tokenizer.ggml.add_space_prefix").value_or(true)) {
      pipeline["normalizer"] = {{"type", "Sequence"},
                                {"normalizers",
                                 {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                  {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}};
    } else {
      pipeline["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}};
    }
    pipeline["decoder"] = {{"type", "Sequence"},
                           {"decoders",
                            {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                             {{"type", "ByteFallback"}},
                             {{"type", "Fuse"}},
                             {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
    spec.kind = TokenizerKind::kSentencePieceBpe;
    st.add_bos = g->get_bool("tokenizer.ggml.add_bos_token").value_or(true);
  } else if (model == "bert") {
    m.type = ModelSpec::Type::kWordPiece;
    m.unk = st.unk;
    pipeline["normalizer"] = {{"type", "BertNormalizer"}, {"lowercase", true}};
    pipeline["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
    pipeline["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}};
    spec.kind = TokenizerKind::kWordPiece;
    if (st.cls) spec.prefix_ids.push_back(*st.cls);
    if (st.sep) spec.suffix_ids.push_back(*st.sep);
  } else {
    fail(ErrorCode::kUnsupported, "{}: tokenizer.ggml.model '{}' is not supported (gpt2, llama, bert)", path, model);
  }
  st.add_eos = g->get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  if (model != "bert") {
    if (st.add_bos && st.bos) spec.prefix_ids.push_back(*st.bos);
    if (st.add_eos && st.eos) spec.suffix_ids.push_back(*st.eos);
  }
  parse_pipeline_json(pipeline, path, spec);
  finish_model(m);
  return spec;
}

}  // namespace sampan::tok
