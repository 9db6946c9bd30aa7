// Finetuning data (train/dataset.h): the three JSON-line forms, their loss masks, truncation and
// dropping, batching into shifted targets, and the one-line errors naming file and line. The
// tokenizer is the llama-spm fixture (SentencePiece BPE with BOS), whose own encode() is tested
// against HF tokenizers elsewhere; expected ids here are built from it piece by piece.
#include <catch2/catch.hpp>
#include <fstream>

#include "engine/chat/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/train/dataset.h"
#include "tests/unit/loader_test_util.h"

namespace {

using sampan::ErrorCode;
using sampan::test::expect_error;
using sampan::test::TempDir;
using sampan::train::DatasetStats;
using sampan::train::Example;
using sampan::train::kIgnoreIndex;

const std::string kTokenizer = std::string(SAMPAN_SOURCE_DIR) + "/tests/data/tokenizers/llama-spm";

// ChatML-like, with the turn end inside the rendered assistant turn (what the model must learn).
const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}";

std::string write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::vector<int32_t> concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace

TEST_CASE("text and prompt/completion lines get BOS, EOS and their loss masks", "[dataset]") {
  auto tok = sampan::tok::load_tokenizer(kTokenizer);
  const int32_t bos = *tok->special().bos, eos = *tok->special().eos;
  TempDir dir("dataset");
  const std::string path =
      write(dir, "d.jsonl",
            "{\"text\": \"The cat sat on the mat.\"}\n"
            "\n"
            "{\"prompt\": \"Q: two plus two?\", \"completion\": \" A: four\"}\r\n");
  DatasetStats st;
  const std::vector<Example> ex = sampan::train::load_examples(path, *tok, nullptr, 512, &st);
  REQUIRE(ex.size() == 2);
  CHECK(st.lines == 2);
  CHECK(st.examples == 2);
  CHECK(st.truncated == 0);
  CHECK(st.dropped == 0);

  const auto text_ids = tok->encode("The cat sat on the mat.", false);
  CHECK(ex[0].ids == concat({{bos}, text_ids, {eos}}));
  CHECK(ex[0].line == 1);
  CHECK(ex[0].loss[0] == 0);
  for (size_t t = 1; t < ex[0].loss.size(); ++t) CHECK(ex[0].loss[t] == 1);

  const auto p = tok->encode("Q: two plus two?", false);
  const auto c = tok->encode(" A: four", false);
  CHECK(ex[1].ids == concat({{bos}, p, c, {eos}}));
  CHECK(ex[1].line == 3);
  for (size_t t = 0; t < ex[1].ids.size(); ++t) CHECK(ex[1].loss[t] == (t > p.size() ? 1 : 0));
  CHECK(st.tokens == static_cast<int64_t>(ex[0].ids.size() + ex[1].ids.size()));
  CHECK(st.loss_tokens == static_cast<int64_t>(ex[0].ids.size() - 1 + c.size() + 1));
}

TEST_CASE("messages: loss on the assistant turns only, through the template", "[dataset]") {
  auto tok = sampan::tok::load_tokenizer(kTokenizer);
  const auto tmpl = sampan::chat::Template::parse(kTemplate, "test");
  TempDir dir("dataset");
  const std::string path = write(
      dir, "chat.jsonl",
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, )"
      R"({"role": "assistant", "content": "Hello there"}, {"role": "user", "content": "Bye"}, )"
      R"({"role": "assistant", "content": "Goodbye"}]})"
      "\n");
  const auto ex = sampan::train::load_examples(path, *tok, &tmpl, 512, nullptr);
  REQUIRE(ex.size() == 1);
  const std::string rendered =
      "<s><|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello there</s>\n"
      "<|user|>\nBye</s>\n<|assistant|>\nGoodbye</s>\n";
  CHECK(ex[0].ids == tok->encode(rendered, false));
  // The learned tokens, decoded run by run, are exactly the two assistant replies with their
  // turn ends.
  std::vector<std::string> runs;
  std::vector<int32_t> run;
  for (size_t t = 0; t <= ex[0].ids.size(); ++t) {
    if (t < ex[0].ids.size() && ex[0].loss[t]) {
      run.push_back(ex[0].ids[t]);
    } else if (!run.empty()) {
      runs.push_back(tok->decode(run));
      run.clear();
    }
  }
  REQUIRE(runs.size() == 2);
  CHECK(runs[0] == "Hello there</s>\n");
  CHECK(runs[1] == "Goodbye</s>\n");
}

TEST_CASE("long examples are truncated and counted; loss-free ones dropped", "[dataset]") {
  auto tok = sampan::tok::load_tokenizer(kTokenizer);
  TempDir dir("dataset");
  std::string long_text;
  for (int i = 0; i < 50; ++i) long_text += "word ";
  const std::string path = write(
      dir, "d.jsonl",
      "{\"text\": \"" + long_text + "\"}\n{\"prompt\": \"" + long_text +
          "\", \"completion\": \"x\"}\n{\"text\": \"short\"}\n");
  DatasetStats st;
  const auto ex = sampan::train::load_examples(path, *tok, nullptr, 16, &st);
  CHECK(st.lines == 3);
  CHECK(st.truncated == 2);
  CHECK(st.dropped == 1);  // the prompt fills all 16 tokens: no completion token is left
  REQUIRE(ex.size() == 2);
  CHECK(ex[0].ids.size() == 16);
  CHECK(ex[0].line == 1);
  CHECK(ex[1].line == 3);
}

TEST_CASE("make_batch pads rows and shifts targets under the loss mask", "[dataset]") {
  std::vector<Example> ex(2);
  ex[0].ids = {5, 6, 7, 8};
  ex[0].loss = {0, 0, 1, 1};
  ex[1].ids = {9, 10};
  ex[1].loss = {0, 1};
  const auto b = sampan::train::make_batch(ex, {1, 0});
  CHECK(b.batch == 2);
  CHECK(b.seq_len == 4);
  CHECK(b.lengths == std::vector<int32_t>{2, 4});
  CHECK(b.ids == std::vector<int32_t>{9, 10, 0, 0, 5, 6, 7, 8});
  const int32_t X = kIgnoreIndex;
  CHECK(b.targets == std::vector<int32_t>{10, X, X, X, X, 7, 8, X});
  CHECK(b.n_targets() == 3);
}

TEST_CASE("bad data lines are one-line errors naming file and line", "[dataset]") {
  auto tok = sampan::tok::load_tokenizer(kTokenizer);
  const auto tmpl = sampan::chat::Template::parse(kTemplate, "test");
  TempDir dir("dataset");
  const std::string good = "{\"text\": \"fine\"}\n";
  struct Case {
    std::string line;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"{\"text\": \"unterminated}", {":2:", "not JSON"}},
      {"[1, 2]", {":2:", "array is not a JSON object"}},
      {"{\"txt\": \"x\"}", {":2:", "none of"}},
      {"{\"text\": 5}", {":2:", "\"text\" is number"}},
      {"{\"prompt\": \"x\"}", {":2:", "without \"completion\""}},
      {"{\"completion\": \"x\"}", {":2:", "without \"prompt\""}},
      {"{\"prompt\": \"x\", \"completion\": null}", {":2:", "\"completion\" is null"}},
      {"{\"messages\": []}", {":2:", "empty array"}},
      {"{\"messages\": [\"hi\"]}", {":2:", "messages[0] is string"}},
      {"{\"messages\": [{\"role\": \"user\"}]}", {":2:", "messages[0] has no \"content\""}},
      {"{\"messages\": [{\"role\": \"user\", \"content\": [1]}]}", {":2:", "messages[0].content is array"}},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", {":2:", "no assistant turn"}},
  };
  for (const Case& c : cases) {
    INFO(c.line);
    const std::string path = write(dir, "bad.jsonl", good + c.line + "\n" + good);
    auto needles = c.needles;
    needles.push_back(path);
    expect_error([&] { sampan::train::load_examples(path, *tok, &tmpl, 64, nullptr); },
                 ErrorCode::kInvalidArgument, needles);
  }
  // messages without a chat template
  const std::string chat = write(
      dir, "chat.jsonl",
      R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})");
  expect_error([&] { sampan::train::load_examples(chat, *tok, nullptr, 64, nullptr); },
               ErrorCode::kInvalidArgument, {":1:", "chat template"});
  expect_error([&] { sampan::train::load_examples(write(dir, "e.jsonl", "\n  \n"), *tok, nullptr, 64, nullptr); },
               ErrorCode::kInvalidArgument, {"no data lines"});
  expect_error([&] { sampan::train::load_examples(dir.file("missing.jsonl"), *tok, nullptr, 64, nullptr); },
               ErrorCode::kNotFound, {"missing.jsonl", "cannot open"});
}
