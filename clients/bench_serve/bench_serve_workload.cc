#include "clients/bench_serve/bench_serve_workload.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "engine/core/error.h"

namespace sampan::bench {

const std::vector<std::string>& synthetic_words() {
  // Checked to be one token each (with the leading space) in the llama SentencePiece, GPT-2 and
  // BERT vocabularies of tests/data/tokenizers.
  static const std::vector<std::string> kWords = [] {
    std::istringstream in(
        "the of and to in is that it was for on are as with his they at be this from have or by "
        "one had not but what all were when we there can an your which their said if do will "
        "each about how up out them then she many some so these would other into has more her "
        "two like him see time could no make than first been its who now people my made over "
        "did down only way find use may water long little very after words called just where "
        "most know get through back much before go good new write our used me man too any day "
        "same right look think also around another came come work three word must because does "
        "part even place well such here take why things help put years different away again off "
        "went old number great tell men say small every found still between name should home "
        "big give air line set own under read last never us left end along while might next "
        "sound below saw something thought both few those always looked show large often "
        "together asked house world going want school important until form food keep children "
        "feet land side without boy once animals life enough took sometimes four head above "
        "kind began almost live page got earth need far hand high year mother light parts "
        "country father let night following picture being study second eyes soon times story "
        "boys since white days paper hard near sentence better best across during today others "
        "however sure means knew try told young miles sun ways thing whole hear example heard "
        "several change answer room sea against top turned learn point city play toward five "
        "using himself usually");
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    return words;
  }();
  return kWords;
}

int64_t draw_length(int64_t mean, double range, std::mt19937_64& rng) {
  if (range <= 0) return std::max<int64_t>(mean, 1);
  const double lo = std::floor(static_cast<double>(mean) * (1.0 - range));
  const double hi = std::ceil(static_cast<double>(mean) * (1.0 + range));
  std::uniform_int_distribution<int64_t> pick(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
  return std::max<int64_t>(pick(rng), 1);
}

Workload Workload::synthetic(const SyntheticOptions& options) {
  Workload w;
  w.synthetic_ = options;
  w.rng_.seed(options.seed);
  return w;
}

namespace {

[[noreturn]] void bad_line(const std::string& path, size_t line, const std::string& why) {
  fail(ErrorCode::kInvalidArgument, "--dataset {}: line {}: {}", path, line, why);
}

Prompt parse_line(const std::string& path, size_t line_no, const std::string& line,
                  int64_t default_max_tokens) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    bad_line(path, line_no, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad_line(path, line_no, "expected a JSON object");
  Prompt p;
  p.max_tokens = default_max_tokens;
  const auto prompt = j.find("prompt");
  const auto messages = j.find("messages");
  if ((prompt != j.end()) == (messages != j.end())) {
    bad_line(path, line_no, "expected exactly one of \"prompt\" or \"messages\"");
  }
  if (prompt != j.end()) {
    if (!prompt->is_string()) bad_line(path, line_no, "\"prompt\" must be a string");
    p.text = prompt->get<std::string>();
  } else {
    if (!messages->is_array() || messages->empty()) {
      bad_line(path, line_no, "\"messages\" must be a non-empty array");
    }
    for (const auto& m : *messages) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
          !m.contains("content") || !m["content"].is_string()) {
        bad_line(path, line_no, "each message needs string \"role\" and \"content\"");
      }
      p.messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
  }
  if (const auto mt = j.find("max_tokens"); mt != j.end()) {
    if (!mt->is_number_integer() || mt->get<int64_t>() < 1) {
      bad_line(path, line_no, "\"max_tokens\" must be an integer >= 1");
    }
    p.max_tokens = mt->get<int64_t>();
  }
  return p;
}

}  // namespace

Workload Workload::from_jsonl(const std::string& path, int64_t default_max_tokens) {
  std::ifstream in(path);
  SAMPAN_CHECK(in.good(), ErrorCode::kNotFound, "--dataset: cannot open '{}'", path);
  Workload w;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (std::all_of(line.begin(), line.end(), [](unsigned char c) { return std::isspace(c); })) {
      continue;
    }
    w.dataset_.push_back(parse_line(path, line_no, line, default_max_tokens));
  }
  SAMPAN_CHECK(!in.bad(), ErrorCode::kIo, "--dataset: error reading '{}'", path);
  SAMPAN_CHECK(!w.dataset_.empty(), ErrorCode::kInvalidArgument, "--dataset {}: no prompts",
               path);
  return w;
}

bool Workload::has_chat_prompts() const {
  return std::any_of(dataset_.begin(), dataset_.end(),
                     [](const Prompt& p) { return !p.messages.empty(); });
}

Prompt Workload::next() {
  if (!synthetic_) {
    Prompt p = dataset_[next_];
    next_ = (next_ + 1) % dataset_.size();
    return p;
  }
  const auto& words = synthetic_words();
  std::uniform_int_distribution<size_t> pick(0, words.size() - 1);
  Prompt p;
  const int64_t n_in = draw_length(synthetic_->input_len, synthetic_->input_range, rng_);
  p.max_tokens = draw_length(synthetic_->output_len, synthetic_->output_range, rng_);
  p.expected_input_tokens = n_in;
  for (int64_t i = 0; i < n_in; ++i) {
    if (i > 0) p.text.push_back(' ');
    p.text += words[pick(rng_)];
  }
  return p;
}

}  // namespace sampan::bench
