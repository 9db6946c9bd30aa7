// GGUF tokenizer metadata -> TokenizerSpec. The pipeline around the vocabulary is described as
// the tokenizer.json of the same family would (the pre-tokenizer of each tokenizer.ggml.pre is in
// pretokenizer_table.cc) and read by the JSON reader, so both sources tokenize identically.
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/loaders/gguf.h"
#include "engine/loaders/json_util.h"
#include "engine/tokenizer/pretokenizer_table.h"
#include "engine/tokenizer/tokenizer_impl.h"

namespace sampan::tok {
namespace {

using json = nlohmann::json;

// The pipeline around a BPE vocabulary for one tokenizer.ggml.pre name (pretokenizer_table.cc).
// What llama.cpp does about BOS for a pre-tokenizer type (pretokenizer_table.h).
struct BosRule {
  bool by_default = false;  // when tokenizer.ggml.add_bos_token is absent
  bool forced = false;      // whatever it says
};

BosRule bpe_pipeline(const std::string& pre, const std::string& path, json& pipeline, ModelSpec& m,
                  TokenizerKind& kind) {
  auto p = gguf_pre_tokenizer(pre);
  if (!p) fail(ErrorCode::kUnsupported, "{}: tokenizer.ggml.pre '{}' is not supported", path, pre);
  pipeline["pre_tokenizer"] = std::move(p->pre_tokenizer);
  const BosRule add_bos{p->add_bos, p->force_bos};
  m.ignore_merges = p->ignore_merges;
  switch (p->text) {
    case GgufPreTokenizer::Text::kByteLevel:
      pipeline["decoder"] = {{"type", "ByteLevel"}};
      kind = TokenizerKind::kByteLevelBpe;
      return add_bos;
    case GgufPreTokenizer::Text::kMetaspace:
      // Spaces are U+2581 in the vocabulary; characters it lacks fall back to <0xXX> tokens.
      pipeline["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}};
      pipeline["decoder"] = {{"type", "Sequence"},
                             {"decoders",
                              {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                               {{"type", "ByteFallback"}},
                               {{"type", "Fuse"}}}}};
      m.byte_fallback = true;
      kind = TokenizerKind::kSentencePieceBpe;
      return add_bos;
    case GgufPreTokenizer::Text::kRaw:
      // Tokens are plain text and decode by concatenation.
      kind = TokenizerKind::kByteLevelBpe;
      return add_bos;
  }
  return add_bos;
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
  // "gemma4" is BPE over raw UTF-8 with spaces as U+2581 and byte fallback; llama.cpp gives it
  // the gemma4 pre-tokenizer whatever tokenizer.ggml.pre says.
  if (model == "gpt2" || model == "gemma4") {
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
    const BosRule bos =
        bpe_pipeline(model == "gemma4" ? std::string("gemma4")
                                       : g->get_string("tokenizer.ggml.pre").value_or(""),
                     path, pipeline, m, spec.kind);
    st.add_bos = bos.forced || g->get_bool("tokenizer.ggml.add_bos_token").value_or(bos.by_default);
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
    fail(ErrorCode::kUnsupported, "{}: tokenizer.ggml.model '{}' is not supported (gpt2, gemma4, llama, bert)", path, model);
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
