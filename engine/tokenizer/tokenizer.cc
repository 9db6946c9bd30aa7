// The Tokenizer implementation shared by every family, load_tokenizer and StreamDecoder.
#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>

#include "engine/core/error.h"
#include "engine/loaders/json_util.h"
#include "engine/tokenizer/tokenizer_impl.h"
#include "engine/tokenizer/unicode.h"

namespace sampan::tok {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

bool is_space_byte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

bool is_word_char_before(std::string_view s, size_t pos) {
  if (pos == 0) return false;
  size_t b = pos - 1;
  while (b > 0 && (static_cast<uint8_t>(s[b]) & 0xC0) == 0x80) --b;
  size_t i = b;
  const char32_t c = unicode::next_code_point(s, i);
  return !unicode::is_whitespace(c) && !unicode::is_punctuation(c) && !(c < 0x80 && std::ispunct(static_cast<int>(c)));
}

bool is_word_char_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return false;
  const char32_t c = unicode::next_code_point(s, pos);
  return !unicode::is_whitespace(c) && !unicode::is_punctuation(c) && !(c < 0x80 && std::ispunct(static_cast<int>(c)));
}

// Inverse of ByteLevel's byte-to-character mapping; every character of a piece that went through
// it is in that alphabet.
std::string unmap_bytes(std::string_view piece) {
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    const size_t b = i;
    const int v = unicode::char_to_byte(unicode::next_code_point(piece, i));
    if (v >= 0) {
      out.push_back(static_cast<char>(v));
    } else {
      out.append(piece, b, i - b);
    }
  }
  return out;
}

class TokenizerImpl final : public Tokenizer {
 public:
  explicit TokenizerImpl(TokenizerSpec spec) : s_(std::move(spec)) {
    for (size_t k = 0; k < s_.added.size(); ++k) {
      const AddedToken& a = s_.added[k];
      if (a.content.empty()) continue;
      by_first_byte_[static_cast<uint8_t>(a.content[0])].push_back(k);
      if (a.special) special_ids_.insert(a.id);
      added_ids_.insert(a.id);
    }
    raw_added_ = s_.kind == TokenizerKind::kByteLevelBpe;
    byte_level_ = std::any_of(s_.pre_tokenizers.begin(), s_.pre_tokenizers.end(),
                              [](const PreTokenizerStep& p) { return p.kind == PreTokenizerStep::Kind::kByteLevel; });
  }

  TokenizerKind kind() const override { return s_.kind; }

  std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
    std::vector<int32_t> out;
    if (add_special) out = s_.prefix_ids;
    walk(
        text, [&](std::string_view seg, bool at_start) { encode_segment(seg, at_start, out); },
        [&](const AddedToken& a) { out.push_back(a.id); });
    if (add_special) out.insert(out.end(), s_.suffix_ids.begin(), s_.suffix_ids.end());
    return out;
  }

  std::vector<std::string> pre_tokenize(std::string_view text) const override {
    std::vector<std::string> out;
    walk(
        text,
        [&](std::string_view seg, bool at_start) {
          if (seg.empty()) return;
          for (std::string& w : tok::pre_tokenize(s_.pre_tokenizers, normalize(s_.normalizers, seg), at_start)) {
            out.push_back(byte_level_ ? unmap_bytes(w) : std::move(w));
          }
        },
        [&](const AddedToken& a) { out.push_back(a.content); });
    return out;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    std::string out;
    for (int32_t id : ids) {
      SAMPAN_CHECK(id >= 0 && id < vocab_size(), ErrorCode::kInvalidArgument,
                   "token id {} is outside the vocabulary of {} tokens", id, vocab_size());
      if (skip_special && is_special(id)) continue;
      if (raw_added_ && added_ids_.count(id)) {
        // Added tokens hold plain text, not byte-level characters ("ü" is not byte 0xFC).
        out += run_decoders(s_.decoders, std::move(tokens));
        tokens.clear();
        out += s_.model.vocab[id];
        continue;
      }
      tokens.push_back(s_.model.vocab[id]);
    }
    return out + run_decoders(s_.decoders, std::move(tokens));
  }

  int64_t vocab_size() const override { return static_cast<int64_t>(s_.model.vocab.size()); }
  std::string_view token_text(int32_t id) const override {
    SAMPAN_CHECK(id >= 0 && id < vocab_size(), ErrorCode::kInvalidArgument,
                 "token id {} is outside the vocabulary of {} tokens", id, vocab_size());
    return s_.model.vocab[id];
  }
  std::optional<int32_t> token_id(std::string_view text) const override {
    auto it = s_.model.ids.find(std::string(text));
    if (it == s_.model.ids.end()) return std::nullopt;
    return it->second;
  }
  bool is_special(int32_t id) const override { return special_ids_.count(id) != 0; }
  const SpecialTokens& special() const override { return s_.special; }
  const std::string& chat_template() const override { return s_.chat_template; }
  std::string bos_text() const override { return s_.bos_text; }
  std::string eos_text() const override { return s_.eos_text; }

 private:
  // Longest added token starting at `i` (leftmost-longest, as HF matches them), with its span
  // widened by lstrip/rstrip whitespace; nullptr when none applies here.
  const AddedToken* match_added(std::string_view text, size_t i, size_t seg_begin, size_t& b,
                                size_t& e) const {
    const auto& cands = by_first_byte_[static_cast<uint8_t>(text[i])];
    const AddedToken* best = nullptr;
    for (size_t k : cands) {
      const AddedToken& a = s_.added[k];
      if (text.compare(i, a.content.size(), a.content) != 0) continue;
      if (a.single_word && (is_word_char_before(text, i) || is_word_char_at(text, i + a.content.size()))) continue;
      if (!best || a.content.size() > best->content.size()) best = &a;
    }
    if (!best) return nullptr;
    b = i;
    e = i + best->content.size();
    if (best->lstrip) while (b > seg_begin && is_space_byte(text[b - 1])) --b;
    if (best->rstrip) while (e < text.size() && is_space_byte(text[e])) ++e;
    return best;
  }

  // Cuts `text` at the added tokens in it: on_text(segment, at_start) for the text between them
  // (possibly empty), on_added(token) for each one, in order.
  template <typename OnText, typename OnAdded>
  void walk(std::string_view text, OnText on_text, OnAdded on_added) const {
    size_t seg_begin = 0, i = 0;
    while (i < text.size()) {
      size_t m_begin, m_end;
      const AddedToken* hit = match_added(text, i, seg_begin, m_begin, m_end);
      if (!hit) {
        ++i;
        continue;
      }
      on_text(text.substr(seg_begin, m_begin - seg_begin), seg_begin == 0);
      on_added(*hit);
      seg_begin = i = m_end;
    }
    on_text(text.substr(seg_begin), seg_begin == 0);
  }

  void encode_segment(std::string_view seg, bool at_start, std::vector<int32_t>& out) const {
    if (seg.empty()) return;
    const std::string norm = normalize(s_.normalizers, seg);
    for (const std::string& word : tok::pre_tokenize(s_.pre_tokenizers, norm, at_start)) {
      model_encode(s_.model, word, out);
    }
  }

  TokenizerSpec s_;
  std::vector<size_t> by_first_byte_[256];
  std::unordered_set<int32_t> special_ids_, added_ids_;
  bool raw_added_ = false;
  bool byte_level_ = false;  // a ByteLevel pre-tokenizer step maps bytes to characters
};

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  SAMPAN_CHECK(in.good(), ErrorCode::kIo, "{}: cannot be read", p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string token_string(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

void apply_config(TokenizerSpec& spec, const fs::path& config_path, const fs::path& jinja_path) {
  if (fs::exists(config_path)) {
    const std::string src = config_path.string();
    const json c = parse_json_strict(read_text(config_path), src, "tokenizer config", 64);
    SAMPAN_CHECK(c.is_object(), ErrorCode::kInvalidModel, "{}: top level is not an object", src);
    spec.bos_text = token_string(c.value("bos_token", json()));
    spec.eos_text = token_string(c.value("eos_token", json()));
    auto id_of = [&](const char* key) -> std::optional<int32_t> {
      const std::string t = token_string(c.value(key, json()));
      if (t.empty()) return std::nullopt;
      auto it = spec.model.ids.find(t);
      SAMPAN_CHECK(it != spec.model.ids.end(), ErrorCode::kInvalidModel,
                   "{}: {} '{}' is not in the vocabulary", src, key, printable(t));
      return it->second;
    };
    SpecialTokens& st = spec.special;
    if (auto v = id_of("bos_token")) st.bos = v;
    if (auto v = id_of("eos_token")) st.eos = v;
    if (auto v = id_of("unk_token")) st.unk = v;
    if (auto v = id_of("pad_token")) st.pad = v;
    if (auto v = id_of("sep_token")) st.sep = v;
    if (auto v = id_of("cls_token")) st.cls = v;
    if (auto v = id_of("mask_token")) st.mask = v;
    if (c.contains("add_bos_token") && c["add_bos_token"].is_boolean()) st.add_bos = c["add_bos_token"].get<bool>();
    if (c.contains("add_eos_token") && c["add_eos_token"].is_boolean()) st.add_eos = c["add_eos_token"].get<bool>();
    const json tpl = c.value("chat_template", json());
    if (tpl.is_string()) {
      spec.chat_template = tpl.get<std::string>();
    } else if (tpl.is_array()) {
      for (const json& t : tpl) {
        if (t.is_object() && t.contains("name") && t["name"] == "default" && t.contains("template") && t["template"].is_string()) {
          spec.chat_template = t["template"].get<std::string>();
        }
      }
    }
  }
  if (fs::exists(jinja_path)) spec.chat_template = read_text(jinja_path);
}

void finish_specials(TokenizerSpec& spec) {
  SpecialTokens& st = spec.special;
  const auto& prefix = spec.prefix_ids;
  const auto& suffix = spec.suffix_ids;
  if (spec.kind != TokenizerKind::kWordPiece) {
    if (!st.bos && !prefix.empty()) st.bos = prefix.front();
    // The post-processor decides what add_special adds; the flags report it.
    if (!prefix.empty() || !suffix.empty()) {
      st.add_bos = st.bos && !prefix.empty() && prefix.front() == *st.bos;
      st.add_eos = st.eos && !suffix.empty() && suffix.back() == *st.eos;
    } else {
      if (st.add_bos && st.bos) spec.prefix_ids.push_back(*st.bos);
      if (st.add_eos && st.eos) spec.suffix_ids.push_back(*st.eos);
    }
  } else {
    if (!st.cls && !prefix.empty()) st.cls = prefix.front();
    if (!st.sep && !suffix.empty()) st.sep = suffix.back();
  }
  if (st.eos) st.eos_ids.insert(st.eos_ids.begin(), *st.eos);
  for (const char* name : {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"}) {
    auto it = spec.model.ids.find(name);
    if (it != spec.model.ids.end()) st.eos_ids.push_back(it->second);
  }
  std::sort(st.eos_ids.begin(), st.eos_ids.end());
  st.eos_ids.erase(std::unique(st.eos_ids.begin(), st.eos_ids.end()), st.eos_ids.end());
  auto text_of = [&](std::optional<int32_t> id) {
    return id && *id < static_cast<int32_t>(spec.model.vocab.size()) ? spec.model.vocab[*id] : std::string();
  };
  if (spec.bos_text.empty()) spec.bos_text = text_of(spec.kind == TokenizerKind::kWordPiece ? st.cls : st.bos);
  if (spec.eos_text.empty()) spec.eos_text = text_of(spec.kind == TokenizerKind::kWordPiece ? st.sep : st.eos);
  // every id the post-processor adds must exist
  for (const auto* list : {&spec.prefix_ids, &spec.suffix_ids}) {
    for (int32_t id : *list) {
      SAMPAN_CHECK(id >= 0 && id < static_cast<int32_t>(spec.model.vocab.size()), ErrorCode::kInvalidModel,
                   "{}: post_processor adds token id {} outside the vocabulary of {} tokens", spec.source,
                   id, spec.model.vocab.size());
    }
  }
}

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(TokenizerSpec spec) {
  return std::make_unique<TokenizerImpl>(std::move(spec));
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  fs::path p(path);
  SAMPAN_CHECK(fs::exists(p), ErrorCode::kNotFound, "{}: no such file or directory", path);
  TokenizerSpec spec;
  if (fs::is_directory(p)) {
    const fs::path tj = p / "tokenizer.json";
    SAMPAN_CHECK(fs::exists(tj), ErrorCode::kNotFound, "{}: no tokenizer.json in this directory", path);
    spec = spec_from_json(parse_json_strict(read_text(tj), tj.string(), "tokenizer", 128), tj.string());
    apply_config(spec, p / "tokenizer_config.json", p / "chat_template.jinja");
  } else if (p.extension() == ".gguf") {
    spec = spec_from_gguf(path);
  } else {
    spec = spec_from_json(parse_json_strict(read_text(p), path, "tokenizer", 128), path);
    apply_config(spec, p.parent_path() / "tokenizer_config.json", p.parent_path() / "chat_template.jinja");
  }
  finish_specials(spec);
  return make_tokenizer(std::move(spec));
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  ids_.push_back(id);
  const std::string text = tokenizer_.decode(ids_, skip_special_);
  // decode(window) is a prefix-stable function of the window for every supported decoder, so
  // the text past `emitted_` is new; hold back a trailing incomplete UTF-8 sequence.
  const size_t keep = unicode::incomplete_utf8_suffix(text);
  if (text.size() < emitted_ + keep || text.size() - keep <= emitted_) return {};
  std::string out = text.substr(emitted_, text.size() - keep - emitted_);
  emitted_ = text.size() - keep;
  // Shrink the window once it is long and fully emitted: keep the last token as context so that
  // a leading-space rule (SentencePiece "▁", WordPiece joining) still sees a predecessor.
  if (keep == 0 && ids_.size() > 32 && !(skip_special_ && tokenizer_.is_special(ids_.back()))) {
    ids_.erase(ids_.begin(), ids_.end() - 1);
    emitted_ = tokenizer_.decode(ids_, skip_special_).size();
  }
  return out;
}

std::string StreamDecoder::flush() {
  const std::string text = tokenizer_.decode(ids_, skip_special_);
  std::string out = text.size() > emitted_ ? text.substr(emitted_) : std::string();
  ids_.clear();
  emitted_ = 0;
  return out;
}

}  // namespace sampan::tok
