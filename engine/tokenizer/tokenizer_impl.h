// Internal pieces of the tokenizer pipeline (HF `tokenizers` order): added tokens are split out
// of the raw text, then each remaining segment is normalized, pre-tokenized into words and each
// word run through the model; the post-processor adds BOS/EOS/[CLS]/[SEP]. Decoding maps ids to
// strings and runs the decoder chain. GGUF vocabularies are converted to the same description.
#pragma once

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace sampan::tok {

// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available).
class Regex {
 public:
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Byte ranges [begin, end) of every non-empty, non-overlapping match in `s`. With
  // `keep_empty`, empty matches are listed too (a Split turns them into cut points, as HF does),
  // found as Python's re/regex find them: after an empty match at p the search resumes at p
  // wanting a non-empty match there, and an empty match may follow a non-empty one directly.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s, bool keep_empty = false) const;

 private:
  pcre2_code* code_ = nullptr;
};

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false, lstrip = false, rstrip = false, single_word = false;
};

enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct NormalizerStep {
  enum class Kind { kPrepend, kReplace, kBert, kLowercase, kStrip, kUnicodeNorm };
  Kind kind;
  std::string a, b;  // prepend text / replace pattern, content
  bool clean_text = true, chinese_chars = true, strip_accents = false, lowercase = false;
};

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel, kMetaspace, kDigits, kPunctuation, kBert, kWhitespace };
  Kind kind;
  std::shared_ptr<Regex> regex;  // kSplit (also literal patterns, escaped); kByteLevel with use_regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;
  std::string replacement;           // kMetaspace
  std::string prepend_scheme = "always";
  bool split = true;                 // kMetaspace
  bool individual_digits = false;    // kDigits
};

struct DecoderStep {
  enum class Kind { kReplace, kByteFallback, kFuse, kStrip, kByteLevel, kMetaspace, kWordPiece };
  Kind kind;
  std::string a, b;  // replace pattern/content; metaspace replacement; wordpiece prefix
  char strip_char = ' ';
  int start = 0, stop = 0;
  bool cleanup = false;
  std::string prepend_scheme = "always";
};

struct ModelSpec {
  enum class Type { kBpe, kSpmScores, kWordPiece };
  Type type = Type::kBpe;
  std::vector<std::string> vocab;  // id -> text (holes are empty strings)
  std::unordered_map<std::string, int32_t> ids;
  std::vector<float> scores;      // kSpmScores
  // kBpe: (left id << 32 | right id) -> rank and result id
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  std::optional<int32_t> unk;
  std::string wp_prefix = "##";
  size_t wp_max_chars = 100;
  int32_t byte_ids[256];  // <0xXX> tokens, -1 when absent
};

struct TokenizerSpec {
  std::string source;  // file named in errors
  TokenizerKind kind = TokenizerKind::kByteLevelBpe;
  ModelSpec model;
  std::vector<AddedToken> added;
  std::vector<NormalizerStep> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizers;
  std::vector<DecoderStep> decoders;
  std::vector<int32_t> prefix_ids, suffix_ids;  // post-processor for add_special
  SpecialTokens special;
  std::string chat_template, bos_text, eos_text;
};

// Builds a spec from a parsed tokenizer.json (`source` names the file in errors).
TokenizerSpec spec_from_json(const nlohmann::json& j, const std::string& source);
// Builds a spec from a GGUF file's tokenizer.* metadata.
TokenizerSpec spec_from_gguf(const std::string& path);

// Pipeline stages (tokenizer_pipeline.cc).
std::string normalize(const std::vector<NormalizerStep>& steps, std::string_view text);
std::vector<std::string> pre_tokenize(const std::vector<PreTokenizerStep>& steps,
                                      std::string text, bool at_start);
void model_encode(const ModelSpec& m, std::string_view word, std::vector<int32_t>& out);
std::string run_decoders(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens);

std::unique_ptr<Tokenizer> make_tokenizer(TokenizerSpec spec);

}  // namespace sampan::tok

namespace sampan::tok {
// Shared by the JSON and GGUF readers (tokenizer_json.cc).
void add_merge(ModelSpec& model, const std::string& a, const std::string& b, int32_t rank,
               const std::string& source, const std::string& where);
void finish_model(ModelSpec& model);  // fills byte_ids
// Reads normalizer / pre_tokenizer / decoder / post_processor from a tokenizer.json-shaped object.
void parse_pipeline_json(const nlohmann::json& j, const std::string& source, TokenizerSpec& spec);
}  // namespace sampan::tok
