// tokenizer.json -> TokenizerSpec. Every error names the file and the JSON construct.
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/loaders/json_util.h"
#include "engine/tokenizer/tokenizer_impl.h"
#include "engine/tokenizer/unicode_norm.h"

namespace sampan::tok {
namespace {

using json = nlohmann::json;

constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string escape_literal(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

struct Ctx {
  const std::string& source;
  const json& at(const json& obj, const char* key, const std::string& where) const {
    SAMPAN_CHECK(obj.is_object() && obj.contains(key), ErrorCode::kInvalidModel,
                 "{}: {} has no '{}'", source, where, key);
    return obj.at(key);
  }
  std::string str(const json& obj, const char* key, const std::string& where) const {
    const json& v = at(obj, key, where);
    SAMPAN_CHECK(v.is_string(), ErrorCode::kInvalidModel, "{}: {}.{} is {}, expected a string",
                 source, where, key, json_kind(v));
    return v.get<std::string>();
  }
  // Optional members: `fallback` when absent; a present one of another JSON type is an error
  // naming it (json::value would throw a type_error that is not a sampan::Error).
  bool flag(const json& obj, const char* key, bool fallback, const std::string& where) const {
    if (!obj.is_object() || !obj.contains(key)) return fallback;
    const json& v = obj.at(key);
    SAMPAN_CHECK(v.is_boolean(), ErrorCode::kInvalidModel, "{}: {}.{} is {}, expected true or false",
                 source, where, key, json_kind(v));
    return v.get<bool>();
  }
  int64_t integer(const json& obj, const char* key, int64_t fallback, int64_t lo, int64_t hi,
                  const std::string& where) const {
    if (!obj.is_object() || !obj.contains(key)) return fallback;
    const json& v = obj.at(key);
    SAMPAN_CHECK(v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi,
                 ErrorCode::kInvalidModel, "{}: {}.{} is not an integer in [{}, {}]", source, where,
                 key, lo, hi);
    return v.get<int64_t>();
  }
  std::string str_or(const json& obj, const char* key, const std::string& fallback,
                     const std::string& where) const {
    if (!obj.is_object() || !obj.contains(key)) return fallback;
    return str(obj, key, where);
  }
  std::string type(const json& obj, const std::string& where) const {
    return str(obj, "type", where);
  }
  // {"String": s} or {"Regex": r} -> a pattern for PCRE2 (literals escaped).
  std::string pattern(const json& obj, const std::string& where, bool* is_regex = nullptr) const {
    const json& p = at(obj, "pattern", where);
    if (p.is_object() && p.contains("String") && p["String"].is_string()) {
      if (is_regex) *is_regex = false;
      return escape_literal(p["String"].get<std::string>());
    }
    if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) {
      if (is_regex) *is_regex = true;
      return p["Regex"].get<std::string>();
    }
    fail(ErrorCode::kInvalidModel, "{}: {}.pattern is neither {{\"String\": ...}} nor {{\"Regex\": ...}}",
         source, where);
  }
};

SplitBehavior parse_behavior(const Ctx& c, const json& obj, const std::string& where) {
  const std::string b = c.str(obj, "behavior", where);
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  fail(ErrorCode::kInvalidModel, "{}: {}.behavior '{}' is unknown", c.source, where, b);
}

void parse_normalizer(const Ctx& c, const json& n, const std::string& where,
                      std::vector<NormalizerStep>& out) {
  if (n.is_null()) return;
  const std::string t = c.type(n, where);
  using K = NormalizerStep::Kind;
  if (t == "Sequence") {
    const json& list = c.at(n, "normalizers", where);
    SAMPAN_CHECK(list.is_array(), ErrorCode::kInvalidModel, "{}: {}.normalizers is not an array",
                 c.source, where);
    for (size_t i = 0; i < list.size(); ++i) {
      parse_normalizer(c, list[i], fmt::format("{}.normalizers[{}]", where, i), out);
    }
  } else if (t == "Prepend") {
    out.push_back({K::kPrepend, c.str(n, "prepend", where), ""});
  } else if (t == "Replace") {
    bool is_regex = false;
    c.pattern(n, where, &is_regex);
    SAMPAN_CHECK(!is_regex, ErrorCode::kUnsupported, "{}: {}: Replace with a regex is not supported",
                 c.source, where);
    out.push_back({K::kReplace, n["pattern"]["String"].get<std::string>(), c.str(n, "content", where)});
  } else if (t == "BertNormalizer") {
    NormalizerStep s{K::kBert, "", ""};
    s.clean_text = c.flag(n, "clean_text", true, where);
    s.chinese_chars = c.flag(n, "handle_chinese_chars", true, where);
    s.lowercase = c.flag(n, "lowercase", true, where);
    const json sa = n.value("strip_accents", json());
    s.strip_accents = sa.is_boolean() ? sa.get<bool>() : s.lowercase;
    out.push_back(s);
  } else if (t == "Lowercase") {
    out.push_back({K::kLowercase, "", ""});
  } else if (t == "Strip") {
    out.push_back({K::kStrip, "", ""});
  } else if (unicode::NormForm form; unicode::parse_norm_form(t, form)) {
    // "NFC", "NFD", "NFKC" or "NFKD"; the step carries the form's name for the pipeline.
    out.push_back({K::kUnicodeNorm, t, ""});
  } else {
    fail(ErrorCode::kUnsupported, "{}: {}: normalizer type '{}' is not supported", c.source, where, t);
  }
}

void parse_pre_tokenizer(const Ctx& c, const json& p, const std::string& where,
                         std::vector<PreTokenizerStep>& out) {
  if (p.is_null()) return;
  const std::string t = c.type(p, where);
  using K = PreTokenizerStep::Kind;
  PreTokenizerStep s{};
  if (t == "Sequence") {
    const json& list = c.at(p, "pretokenizers", where);
    SAMPAN_CHECK(list.is_array(), ErrorCode::kInvalidModel, "{}: {}.pretokenizers is not an array",
                 c.source, where);
    for (size_t i = 0; i < list.size(); ++i) {
      parse_pre_tokenizer(c, list[i], fmt::format("{}.pretokenizers[{}]", where, i), out);
    }
    return;
  } else if (t == "Split") {
    s.kind = K::kSplit;
    s.regex = std::make_shared<Regex>(c.pattern(p, where), c.source + ": " + where + ".pattern");
    s.behavior = parse_behavior(c, p, where);
    s.invert = c.flag(p, "invert", false, where);
  } else if (t == "ByteLevel") {
    s.kind = K::kByteLevel;
    s.add_prefix_space = c.flag(p, "add_prefix_space", false, where);
    if (c.flag(p, "use_regex", true, where)) s.regex = std::make_shared<Regex>(kGpt2Regex, c.source + ": " + where);
  } else if (t == "Metaspace") {
    s.kind = K::kMetaspace;
    s.replacement = c.str(p, "replacement", where);
    if (p.contains("prepend_scheme")) {
      s.prepend_scheme = c.str(p, "prepend_scheme", where);
    } else {
      s.prepend_scheme = c.flag(p, "add_prefix_space", true, where) ? "always" : "never";
    }
    s.split = c.flag(p, "split", true, where);
  } else if (t == "Digits") {
    s.kind = K::kDigits;
    s.individual_digits = c.flag(p, "individual_digits", false, where);
  } else if (t == "Punctuation") {
    s.kind = K::kPunctuation;
    s.behavior = p.contains("behavior") ? parse_behavior(c, p, where) : SplitBehavior::kIsolated;
  } else if (t == "BertPreTokenizer") {
    s.kind = K::kBert;
  } else if (t == "Whitespace") {
    s.kind = K::kWhitespace;
    s.regex = std::make_shared<Regex>(R"(\w+|[^\w\s]+)", c.source + ": " + where);
  } else {
    fail(ErrorCode::kUnsupported, "{}: {}: pre-tokenizer type '{}' is not supported", c.source, where, t);
  }
  out.push_back(std::move(s));
}

void parse_decoder(const Ctx& c, const json& d, const std::string& where, std::vector<DecoderStep>& out) {
  if (d.is_null()) return;
  const std::string t = c.type(d, where);
  using K = DecoderStep::Kind;
  DecoderStep s{};
  if (t == "Sequence") {
    const json& list = c.at(d, "decoders", where);
    SAMPAN_CHECK(list.is_array(), ErrorCode::kInvalidModel, "{}: {}.decoders is not an array",
                 c.source, where);
    for (size_t i = 0; i < list.size(); ++i) {
      parse_decoder(c, list[i], fmt::format("{}.decoders[{}]", where, i), out);
    }
    return;
  } else if (t == "Replace") {
    bool is_regex = false;
    c.pattern(d, where, &is_regex);
    SAMPAN_CHECK(!is_regex, ErrorCode::kUnsupported, "{}: {}: Replace with a regex is not supported",
                 c.source, where);
    s = {K::kReplace, d["pattern"]["String"].get<std::string>(), c.str(d, "content", where)};
  } else if (t == "ByteFallback") {
    s.kind = K::kByteFallback;
  } else if (t == "Fuse") {
    s.kind = K::kFuse;
  } else if (t == "Strip") {
    s.kind = K::kStrip;
    const std::string content = c.str(d, "content", where);
    SAMPAN_CHECK(content.size() == 1, ErrorCode::kUnsupported, "{}: {}: Strip content '{}' is not one byte",
                 c.source, where, content);
    s.strip_char = content[0];
    s.start = static_cast<int>(c.integer(d, "start", 0, 0, 1 << 20, where));
    s.stop = static_cast<int>(c.integer(d, "stop", 0, 0, 1 << 20, where));
  } else if (t == "ByteLevel") {
    s.kind = K::kByteLevel;
  } else if (t == "Metaspace") {
    s.kind = K::kMetaspace;
    s.a = c.str(d, "replacement", where);
    if (d.contains("prepend_scheme")) {
      s.prepend_scheme = c.str(d, "prepend_scheme", where);
    } else {
      s.prepend_scheme = c.flag(d, "add_prefix_space", true, where) ? "always" : "never";
    }
  } else if (t == "WordPiece") {
    s.kind = K::kWordPiece;
    s.a = c.str_or(d, "prefix", "##", where);
    s.cleanup = c.flag(d, "cleanup", true, where);
  } else {
    fail(ErrorCode::kUnsupported, "{}: {}: decoder type '{}' is not supported", c.source, where, t);
  }
  out.push_back(std::move(s));
}

int32_t special_id(const Ctx& c, const json& specials, const std::string& name, const std::string& where) {
  SAMPAN_CHECK(specials.is_object() && specials.contains(name), ErrorCode::kInvalidModel,
               "{}: {} names special token '{}' that special_tokens does not define", c.source, where,
               name);
  const json& ids = c.at(specials[name], "ids", where);
  SAMPAN_CHECK(ids.is_array() && ids.size() == 1 && ids[0].is_number_integer(), ErrorCode::kUnsupported,
               "{}: {}: special token '{}' must map to exactly one id", c.source, where, name);
  return ids[0].get<int32_t>();
}

void parse_post(const Ctx& c, const json& p, const std::string& where, TokenizerSpec& spec) {
  if (p.is_null()) return;
  const std::string t = c.type(p, where);
  if (t == "Sequence") {
    const json& list = c.at(p, "processors", where);
    for (size_t i = 0; i < list.size(); ++i) {
      parse_post(c, list[i], fmt::format("{}.processors[{}]", where, i), spec);
    }
  } else if (t == "TemplateProcessing") {
    const json& single = c.at(p, "single", where);
    SAMPAN_CHECK(single.is_array(), ErrorCode::kInvalidModel, "{}: {}.single is not an array", c.source, where);
    bool seen_a = false;
    for (const json& item : single) {
      if (item.contains("Sequence")) {
        seen_a = true;
      } else if (item.contains("SpecialToken")) {
        const int32_t id = special_id(c, p.value("special_tokens", json::object()),
                                      c.str(item["SpecialToken"], "id", where + ".single"), where);
        (seen_a ? spec.suffix_ids : spec.prefix_ids).push_back(id);
      } else {
        fail(ErrorCode::kInvalidModel, "{}: {}.single has an item that is neither Sequence nor SpecialToken",
             c.source, where);
      }
    }
  } else if (t == "BertProcessing" || t == "RobertaProcessing") {
    const json& cls = c.at(p, "cls", where);
    const json& sep = c.at(p, "sep", where);
    SAMPAN_CHECK(cls.is_array() && cls.size() == 2 && sep.is_array() && sep.size() == 2,
                 ErrorCode::kInvalidModel, "{}: {}: cls/sep must be [token, id]", c.source, where);
    spec.prefix_ids.push_back(cls[1].get<int32_t>());
    spec.suffix_ids.push_back(sep[1].get<int32_t>());
  } else if (t == "ByteLevel") {
    // offsets only: no ids added
  } else {
    fail(ErrorCode::kUnsupported, "{}: {}: post-processor type '{}' is not supported", c.source, where, t);
  }
}

void parse_model(const Ctx& c, const json& m, TokenizerSpec& spec) {
  ModelSpec& model = spec.model;
  std::string type = m.contains("type") ? c.str(m, "type", "model") : "";
  if (type.empty()) type = m.contains("merges") ? "BPE" : "WordPiece";
  if (type == "BPE") {
    model.type = ModelSpec::Type::kBpe;
  } else if (type == "WordPiece") {
    model.type = ModelSpec::Type::kWordPiece;
  } else {
    fail(ErrorCode::kUnsupported, "{}: model.type '{}' is not supported (BPE, WordPiece)", c.source, type);
  }
  const json& vocab = c.at(m, "vocab", "model");
  SAMPAN_CHECK(vocab.is_object(), ErrorCode::kInvalidModel, "{}: model.vocab is {}, expected an object",
               c.source, json_kind(vocab));
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    SAMPAN_CHECK(it.value().is_number_integer() && it.value().get<int64_t>() >= 0 &&
                     it.value().get<int64_t>() < (1 << 24),
                 ErrorCode::kInvalidModel, "{}: model.vocab['{}'] is not a valid token id", c.source,
                 printable(it.key()));
    const auto id = it.value().get<int32_t>();
    if (static_cast<size_t>(id) >= model.vocab.size()) model.vocab.resize(id + 1);
    model.vocab[id] = it.key();
    model.ids[it.key()] = id;
  }
  auto opt_str = [&](const char* key) -> std::string {
    return m.contains(key) && m[key].is_string() ? m[key].get<std::string>() : "";
  };
  const std::string unk = opt_str("unk_token");
  if (!unk.empty()) {
    auto it = model.ids.find(unk);
    SAMPAN_CHECK(it != model.ids.end(), ErrorCode::kInvalidModel,
                 "{}: model.unk_token '{}' is not in the vocabulary", c.source, printable(unk));
    model.unk = it->second;
  }
  if (model.type == ModelSpec::Type::kWordPiece) {
    if (m.contains("continuing_subword_prefix")) model.wp_prefix = opt_str("continuing_subword_prefix");
    model.wp_max_chars = c.integer(m, "max_input_chars_per_word", 100, 1, 1 << 30, "model");
    return;
  }
  SAMPAN_CHECK(opt_str("continuing_subword_prefix").empty() && opt_str("end_of_word_suffix").empty(),
               ErrorCode::kUnsupported, "{}: model: BPE with continuing_subword_prefix/end_of_word_suffix is not supported",
               c.source);
  model.byte_fallback = c.flag(m, "byte_fallback", false, "model");
  model.fuse_unk = c.flag(m, "fuse_unk", false, "model");
  model.ignore_merges = c.flag(m, "ignore_merges", false, "model");
  const json& merges = c.at(m, "merges", "model");
  SAMPAN_CHECK(merges.is_array(), ErrorCode::kInvalidModel, "{}: model.merges is not an array", c.source);
  for (size_t r = 0; r < merges.size(); ++r) {
    std::string a, b;
    const json& e = merges[r];
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ', 1);
      SAMPAN_CHECK(sp != std::string::npos, ErrorCode::kInvalidModel,
                   "{}: model.merges[{}] ('{}') is not two tokens", c.source, r, printable(s));
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      fail(ErrorCode::kInvalidModel, "{}: model.merges[{}] is neither \"a b\" nor [a, b]", c.source, r);
    }
    add_merge(model, a, b, static_cast<int32_t>(r), c.source, fmt::format("model.merges[{}]", r));
  }
}

}  // namespace

void add_merge(ModelSpec& model, const std::string& a, const std::string& b, int32_t rank,
               const std::string& source, const std::string& where) {
  auto ia = model.ids.find(a), ib = model.ids.find(b), ic = model.ids.find(a + b);
  SAMPAN_CHECK(ia != model.ids.end() && ib != model.ids.end() && ic != model.ids.end(),
               ErrorCode::kInvalidModel, "{}: {} ('{} {}') references a token not in the vocabulary",
               source, where, printable(a), printable(b));
  const uint64_t key = (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
  model.merges.emplace(key, std::pair{rank, ic->second});  // first (lowest) rank wins
}

void finish_model(ModelSpec& model) {
  for (int b = 0; b < 256; ++b) {
    auto it = model.ids.find(fmt::format("<0x{:02X}>", b));
    model.byte_ids[b] = it == model.ids.end() ? -1 : it->second;
  }
}

void parse_pipeline_json(const nlohmann::json& j, const std::string& source, TokenizerSpec& spec) {
  const Ctx c{source};
  parse_normalizer(c, j.value("normalizer", json()), "normalizer", spec.normalizers);
  parse_pre_tokenizer(c, j.value("pre_tokenizer", json()), "pre_tokenizer", spec.pre_tokenizers);
  parse_decoder(c, j.value("decoder", json()), "decoder", spec.decoders);
  parse_post(c, j.value("post_processor", json()), "post_processor", spec);
}

TokenizerSpec spec_from_json(const nlohmann::json& j, const std::string& source) {
  TokenizerSpec spec;
  spec.source = source;
  const Ctx c{source};
  SAMPAN_CHECK(j.is_object(), ErrorCode::kInvalidModel, "{}: top level is {}, expected an object", source,
               json_kind(j));
  SAMPAN_CHECK(j.contains("model") && j["model"].is_object(), ErrorCode::kInvalidModel,
               "{}: missing 'model' object", source);
  parse_model(c, j["model"], spec);
  const json added = j.value("added_tokens", json::array());
  SAMPAN_CHECK(added.is_array(), ErrorCode::kInvalidModel, "{}: added_tokens is {}, expected an array",
               source, json_kind(added));
  for (size_t i = 0; i < added.size(); ++i) {
    const std::string where = fmt::format("added_tokens[{}]", i);
    const json& a = added[i];
    AddedToken t;
    t.content = c.str(a, "content", where);
    const json& id = c.at(a, "id", where);
    SAMPAN_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (1 << 24),
                 ErrorCode::kInvalidModel, "{}: {}.id is not a valid token id", source, where);
    t.id = id.get<int32_t>();
    t.special = c.flag(a, "special", false, where);
    t.lstrip = c.flag(a, "lstrip", false, where);
    t.rstrip = c.flag(a, "rstrip", false, where);
    t.single_word = c.flag(a, "single_word", false, where);
    if (static_cast<size_t>(t.id) >= spec.model.vocab.size()) spec.model.vocab.resize(t.id + 1);
    spec.model.vocab[t.id] = t.content;
    spec.model.ids.emplace(t.content, t.id);
    spec.added.push_back(std::move(t));
  }
  parse_pipeline_json(j, source, spec);
  finish_model(spec.model);
  spec.kind = spec.model.type == ModelSpec::Type::kWordPiece ? TokenizerKind::kWordPiece
              : spec.model.byte_fallback                     ? TokenizerKind::kSentencePieceBpe
                                                             : TokenizerKind::kByteLevelBpe;
  return spec;
}

}  // namespace sampan::tok
