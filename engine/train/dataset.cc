#include "engine/train/dataset.h"

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/chat/chat_template.h"
#include "engine/core/error.h"
#include "engine/tokenizer/tokenizer.h"

namespace sampan::train {
namespace {

using Json = nlohmann::ordered_json;

// Where a data line came from, for every message about it.
struct LineRef {
  const std::string& path;
  int64_t line;
};

[[noreturn]] void bad_line(const LineRef& at, const std::string& what) {
  fail(ErrorCode::kInvalidArgument, "{}:{}: {}", at.path, at.line, what);
}

const char* json_type(const Json& v) { return v.type_name(); }

const std::string& string_field(const Json& obj, const char* key, const LineRef& at) {
  const Json& v = obj.at(key);
  if (!v.is_string()) {
    bad_line(at, fmt::format("\"{}\" is {}, expected a string", key, json_type(v)));
  }
  return v.get_ref<const std::string&>();
}

std::vector<int32_t> with_bos(const tok::Tokenizer& tokenizer, std::vector<int32_t> ids) {
  const tok::SpecialTokens& sp = tokenizer.special();
  if (sp.add_bos && sp.bos && (ids.empty() || ids.front() != *sp.bos)) {
    ids.insert(ids.begin(), *sp.bos);
  }
  return ids;
}

void append_eos(const tok::Tokenizer& tokenizer, Example& ex) {
  const tok::SpecialTokens& sp = tokenizer.special();
  if (sp.eos && (ex.ids.empty() || ex.ids.back() != *sp.eos)) {
    ex.ids.push_back(*sp.eos);
    ex.loss.push_back(1);
  }
}

Example text_example(const tok::Tokenizer& tokenizer, const std::string& text) {
  Example ex;
  ex.ids = with_bos(tokenizer, tokenizer.encode(text, false));
  ex.loss.assign(ex.ids.size(), 1);
  append_eos(tokenizer, ex);
  return ex;
}

Example completion_example(const tok::Tokenizer& tokenizer, const std::string& prompt,
                           const std::string& completion) {
  Example ex;
  ex.ids = with_bos(tokenizer, tokenizer.encode(prompt, false));
  ex.loss.assign(ex.ids.size(), 0);
  for (int32_t id : tokenizer.encode(completion, false)) {
    ex.ids.push_back(id);
    ex.loss.push_back(1);
  }
  append_eos(tokenizer, ex);
  return ex;
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// The template renders the whole conversation; the tokens of assistant turn i are those between
// the rendering of messages[0..i) with the generation prompt and that of messages[0..i]. Both
// prefixes are tokenized on their own and matched against the whole, so a token that merges
// across a turn boundary belongs to the turn it ends in (the way TRL's assistant-only loss
// and HF's prefix tokenization draw it).
Example chat_example(const tok::Tokenizer& tokenizer, const chat::Template& tmpl,
                     const Json& messages, const LineRef& at) {
  auto render = [&](const Json& msgs, bool gen) {
    Json vars = {{"messages", msgs},
                 {"add_generation_prompt", gen},
                 {"bos_token", tokenizer.bos_text()},
                 {"eos_token", tokenizer.eos_text()}};
    return tmpl.render(vars);
  };
  Example ex;
  ex.ids = tokenizer.encode(render(messages, false), false);
  ex.loss.assign(ex.ids.size(), 0);
  Json prefix = Json::array();
  for (const Json& m : messages) {
    if (m.at("role").get_ref<const std::string&>() == "assistant") {
      const size_t begin = common_prefix(ex.ids, tokenizer.encode(render(prefix, true), false));
      prefix.push_back(m);
      const size_t end = common_prefix(ex.ids, tokenizer.encode(render(prefix, false), false));
      for (size_t t = begin; t < end; ++t) ex.loss[t] = 1;
    } else {
      prefix.push_back(m);
    }
  }
  return ex;
}

void check_messages(const Json& messages, const LineRef& at) {
  if (!messages.is_array() || messages.empty()) {
    bad_line(at, fmt::format("\"messages\" is {}, expected a non-empty array",
                             messages.is_array() ? "an empty array" : json_type(messages)));
  }
  bool assistant = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    if (!m.is_object()) {
      bad_line(at, fmt::format("messages[{}] is {}, expected an object", i, json_type(m)));
    }
    for (const char* key : {"role", "content"}) {
      if (!m.contains(key)) bad_line(at, fmt::format("messages[{}] has no \"{}\"", i, key));
      if (!m[key].is_string()) {
        bad_line(at, fmt::format("messages[{}].{} is {}, expected a string", i, key,
                                 json_type(m[key])));
      }
    }
    assistant = assistant || m["role"] == "assistant";
  }
  if (!assistant) bad_line(at, "\"messages\" has no assistant turn to learn from");
}

}  // namespace

std::vector<Example> load_examples(const std::string& path, const tok::Tokenizer& tokenizer,
                                   const chat::Template* chat, int64_t seq_len,
                                   DatasetStats* stats) {
  SAMPAN_CHECK(seq_len >= 2, ErrorCode::kInvalidArgument,
               "--seq-len {}: a training sequence needs at least 2 tokens", seq_len);
  std::ifstream in(path, std::ios::binary);
  SAMPAN_CHECK(in.good(), ErrorCode::kNotFound, "{}: cannot open the data file", path);
  DatasetStats st;
  std::vector<Example> out;
  std::string text;
  int64_t line_no = 0;
  while (std::getline(in, text)) {
    ++line_no;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    ++st.lines;
    const LineRef at{path, line_no};
    Json obj;
    try {
      obj = Json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      // nlohmann's message starts "[json.exception.parse_error.101] parse error at line 1, ...".
      std::string what = e.what();
      const size_t cut = what.find("] ");
      if (cut != std::string::npos) what = what.substr(cut + 2);
      bad_line(at, "not JSON: " + what);
    }
    if (!obj.is_object()) bad_line(at, fmt::format("{} is not a JSON object", json_type(obj)));
    Example ex;
    if (obj.contains("messages")) {
      check_messages(obj["messages"], at);
      if (chat == nullptr) {
        bad_line(at, "a \"messages\" example needs a chat template and the model's tokenizer has "
                     "none");
      }
      ex = chat_example(tokenizer, *chat, obj["messages"], at);
    } else if (obj.contains("prompt") || obj.contains("completion")) {
      if (!obj.contains("prompt")) bad_line(at, "\"completion\" without \"prompt\"");
      if (!obj.contains("completion")) bad_line(at, "\"prompt\" without \"completion\"");
      ex = completion_example(tokenizer, string_field(obj, "prompt", at),
                              string_field(obj, "completion", at));
    } else if (obj.contains("text")) {
      ex = text_example(tokenizer, string_field(obj, "text", at));
    } else {
      bad_line(at, "none of \"text\", \"prompt\"/\"completion\" or \"messages\"");
    }
    ex.line = line_no;
    if (static_cast<int64_t>(ex.ids.size()) > seq_len) {
      ex.ids.resize(static_cast<size_t>(seq_len));
      ex.loss.resize(static_cast<size_t>(seq_len));
      ++st.truncated;
    }
    // The first token is never predicted (nothing comes before it).
    if (!ex.loss.empty()) ex.loss[0] = 0;
    const int64_t n_loss = std::count(ex.loss.begin(), ex.loss.end(), uint8_t{1});
    if (n_loss == 0) {
      ++st.dropped;
      continue;
    }
    st.tokens += static_cast<int64_t>(ex.ids.size());
    st.loss_tokens += n_loss;
    out.push_back(std::move(ex));
  }
  SAMPAN_CHECK(!in.bad(), ErrorCode::kIo, "{}: read failed at line {}", path, line_no + 1);
  SAMPAN_CHECK(st.lines > 0, ErrorCode::kInvalidArgument, "{}: no data lines", path);
  SAMPAN_CHECK(!out.empty(), ErrorCode::kInvalidArgument,
               "{}: none of the {} examples has a token to learn from", path, st.lines);
  st.examples = static_cast<int64_t>(out.size());
  if (stats != nullptr) *stats = st;
  return out;
}

TrainBatch make_batch(const std::vector<Example>& examples, const std::vector<size_t>& rows) {
  SAMPAN_CHECK(!rows.empty(), ErrorCode::kInternal, "make_batch: no rows");
  TrainBatch b;
  b.batch = static_cast<int64_t>(rows.size());
  for (size_t r : rows) {
    b.seq_len = std::max<int64_t>(b.seq_len, static_cast<int64_t>(examples.at(r).ids.size()));
  }
  const size_t L = static_cast<size_t>(b.seq_len);
  b.ids.assign(rows.size() * L, 0);
  b.targets.assign(rows.size() * L, kIgnoreIndex);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Example& ex = examples[rows[i]];
    const size_t n = ex.ids.size();
    b.lengths.push_back(static_cast<int32_t>(n));
    std::copy(ex.ids.begin(), ex.ids.end(), b.ids.begin() + static_cast<ptrdiff_t>(i * L));
    for (size_t t = 0; t + 1 < n; ++t) {
      if (ex.loss[t + 1]) b.targets[i * L + t] = ex.ids[t + 1];
    }
  }
  return b;
}

}  // namespace sampan::train
