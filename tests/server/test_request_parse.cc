// Request validation shared by the HTTP and gRPC front ends: every field, its type errors and
// its ranges, each refusal naming the field.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>

#include "engine/runtime/grammar.h"
#include "server/api_routes.h"
#include "server/request_parse.h"

using sampan::server::ChatRequest;
using sampan::server::CompletionRequest;
using sampan::server::effective_max_tokens;
using sampan::server::Json;
using sampan::server::merge_sampling_fields;
using sampan::server::parse_chat_request;
using sampan::server::parse_completion_request;
using sampan::server::parse_json_object;
using sampan::server::parse_sampling_fields;
using sampan::server::RequestError;
using sampan::server::SamplingFields;

namespace {

Json j(const char* text) { return Json::parse(text); }

// The field a refusal names (its "param"), with a check that the message names it too and
// that the status is 400.
std::string refused_field(const std::function<void()>& f, int status = 400) {
  try {
    f();
  } catch (const RequestError& e) {
    CHECK(e.status() == status);
    if (!e.param().empty()) CHECK(std::string(e.what()).find(e.param()) != std::string::npos);
    return e.param();
  }
  FAIL("no RequestError");
  return "";
}

std::string sampling_refusal(const char* body) {
  return refused_field([&] { parse_sampling_fields(j(body)); });
}

std::string completion_refusal(const char* body) {
  return refused_field([&] { parse_completion_request(j(body)); });
}

std::string chat_refusal(const char* body) {
  return refused_field([&] { parse_chat_request(j(body)); });
}

}  // namespace

TEST_CASE("parse_json_object: invalid JSON and non-objects", "[request_parse]") {
  CHECK(parse_json_object(R"({"a": 1})")["a"] == 1);
  for (const char* text : {"", "{", "{\"a\": }", "nul", "{\"a\": 1} x"}) {
    try {
      parse_json_object(text);
      FAIL("accepted: " << text);
    } catch (const RequestError& e) {
      CHECK(e.status() == 400);
      CHECK(e.param().empty());
      CHECK(std::string(e.what()).rfind("invalid JSON: ", 0) == 0);
      // The library's internal tag is not shown to clients.
      CHECK(std::string(e.what()).find("[json.exception") == std::string::npos);
    }
  }
  for (const char* text : {"[]", "1", "\"s\"", "null", "true"}) {
    try {
      parse_json_object(text, "sampling_parameters");
      FAIL("accepted: " << text);
    } catch (const RequestError& e) {
      CHECK(e.status() == 400);
      CHECK(std::string(e.what()) == "sampling_parameters must be a JSON object");
    }
  }
}

TEST_CASE("sampling fields: defaults when absent or null", "[request_parse]") {
  for (const char* body : {"{}", R"({"temperature": null, "top_p": null, "top_k": null,
      "min_p": null, "seed": null, "stop": null, "max_tokens": null, "ignore_eos": null,
      "presence_penalty": null, "frequency_penalty": null, "repetition_penalty": null,
      "stop_token_ids": null, "unknown_field": [1, 2]})"}) {
    const SamplingFields f = parse_sampling_fields(j(body));
    const sampan::runtime::SamplingParams d;
    CHECK(f.sampling.temperature == d.temperature);
    CHECK(f.sampling.top_p == d.top_p);
    CHECK(f.sampling.top_k == d.top_k);
    CHECK(f.sampling.min_p == d.min_p);
    CHECK(f.sampling.repetition_penalty == d.repetition_penalty);
    CHECK(f.sampling.presence_penalty == d.presence_penalty);
    CHECK(f.sampling.frequency_penalty == d.frequency_penalty);
    CHECK(!f.sampling.seed.has_value());
    CHECK(f.sampling.top_logprobs == 0);
    CHECK(f.stop.empty());
    CHECK(f.stop_ids.empty());
    CHECK(!f.ignore_eos);
    CHECK(!f.max_tokens.has_value());
  }
}

TEST_CASE("sampling fields: every field read", "[request_parse]") {
  const SamplingFields f = parse_sampling_fields(j(R"({
      "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 1234,
      "presence_penalty": -1.5, "frequency_penalty": 2, "repetition_penalty": 1.1,
      "stop": ["\n", "END"], "stop_token_ids": [2, 7], "ignore_eos": true, "max_tokens": 33})"));
  // Values go through float: compare at float precision.
  CHECK(f.sampling.temperature == Approx(0.5));
  CHECK(f.sampling.top_p == Approx(0.9f));
  CHECK(f.sampling.top_k == 40);
  CHECK(f.sampling.min_p == Approx(0.05f));
  CHECK(f.sampling.presence_penalty == Approx(-1.5));
  CHECK(f.sampling.frequency_penalty == Approx(2.0));
  CHECK(f.sampling.repetition_penalty == Approx(1.1f));
  REQUIRE(f.sampling.seed.has_value());
  CHECK(*f.sampling.seed == 1234u);
  CHECK(f.stop == std::vector<std::string>{"\n", "END"});
  CHECK(f.stop_ids == std::vector<int32_t>{2, 7});
  CHECK(f.ignore_eos);
  CHECK(f.max_tokens == 33);

  sampan::runtime::EngineRequest req;
  req.max_tokens = 5;
  f.apply_to(req);
  CHECK(req.sampling.top_k == 40);
  CHECK(req.stop.size() == 2);
  CHECK(req.stop_ids.size() == 2);
  CHECK(req.ignore_eos);
  CHECK(req.max_tokens == 5);  // max_tokens is resolved by the caller (effective_max_tokens)
}

TEST_CASE("sampling fields: special values", "[request_parse]") {
  CHECK(parse_sampling_fields(j(R"({"stop": "x"})")).stop == std::vector<std::string>{"x"});
  CHECK(parse_sampling_fields(j(R"({"stop": []})")).stop.empty());
  CHECK(parse_sampling_fields(j(R"({"top_k": -1})")).sampling.top_k == 0);
  CHECK(parse_sampling_fields(j(R"({"top_k": 0})")).sampling.top_k == 0);
  CHECK(parse_sampling_fields(j(R"({"temperature": 0})")).sampling.temperature == 0.0f);
  CHECK(parse_sampling_fields(j(R"({"top_p": 1})")).sampling.top_p == 1.0f);
  // Integral floats are integers; negative seeds wrap to 64 bits; the full unsigned range works.
  CHECK(parse_sampling_fields(j(R"({"max_tokens": 5.0})")).max_tokens == 5);
  CHECK(*parse_sampling_fields(j(R"({"seed": -1})")).sampling.seed ==
        std::numeric_limits<uint64_t>::max());
  CHECK(*parse_sampling_fields(j(R"({"seed": 18446744073709551615})")).sampling.seed ==
        std::numeric_limits<uint64_t>::max());
  CHECK(*parse_sampling_fields(j(R"({"seed": 0})")).sampling.seed == 0u);
}

TEST_CASE("sampling fields: wrong types name the field", "[request_parse]") {
  CHECK(sampling_refusal(R"({"temperature": "hot"})") == "temperature");
  CHECK(sampling_refusal(R"({"temperature": true})") == "temperature");
  CHECK(sampling_refusal(R"({"top_p": [0.5]})") == "top_p");
  CHECK(sampling_refusal(R"({"top_k": 2.5})") == "top_k");
  CHECK(sampling_refusal(R"({"top_k": "5"})") == "top_k");
  CHECK(sampling_refusal(R"({"min_p": {}})") == "min_p");
  CHECK(sampling_refusal(R"({"seed": 1.5})") == "seed");
  CHECK(sampling_refusal(R"({"seed": "7"})") == "seed");
  CHECK(sampling_refusal(R"({"presence_penalty": "0"})") == "presence_penalty");
  CHECK(sampling_refusal(R"({"frequency_penalty": false})") == "frequency_penalty");
  CHECK(sampling_refusal(R"({"repetition_penalty": "1"})") == "repetition_penalty");
  CHECK(sampling_refusal(R"({"stop": 5})") == "stop");
  CHECK(sampling_refusal(R"({"stop": ["a", 1]})") == "stop");
  CHECK(sampling_refusal(R"({"stop_token_ids": 5})") == "stop_token_ids");
  CHECK(sampling_refusal(R"({"stop_token_ids": ["a"]})") == "stop_token_ids");
  CHECK(sampling_refusal(R"({"ignore_eos": 1})") == "ignore_eos");
  CHECK(sampling_refusal(R"({"max_tokens": "16"})") == "max_tokens");
  CHECK(sampling_refusal(R"({"max_tokens": 16.5})") == "max_tokens");
  CHECK(sampling_refusal(R"({"max_tokens": 1e30})") == "max_tokens");
}

TEST_CASE("sampling fields: ranges", "[request_parse]") {
  CHECK(sampling_refusal(R"({"temperature": -0.1})") == "temperature");
  CHECK(sampling_refusal(R"({"top_p": 0})") == "top_p");
  CHECK(sampling_refusal(R"({"top_p": 1.01})") == "top_p");
  CHECK(sampling_refusal(R"({"top_k": -2})") == "top_k");
  CHECK(sampling_refusal(R"({"top_k": 3000000000})") == "top_k");
  CHECK(sampling_refusal(R"({"min_p": -0.01})") == "min_p");
  CHECK(sampling_refusal(R"({"min_p": 1.5})") == "min_p");
  CHECK(sampling_refusal(R"({"presence_penalty": 2.5})") == "presence_penalty");
  CHECK(sampling_refusal(R"({"presence_penalty": -2.01})") == "presence_penalty");
  CHECK(sampling_refusal(R"({"frequency_penalty": -3})") == "frequency_penalty");
  CHECK(sampling_refusal(R"({"repetition_penalty": 0})") == "repetition_penalty");
  CHECK(sampling_refusal(R"({"repetition_penalty": -1})") == "repetition_penalty");
  CHECK(sampling_refusal(R"({"max_tokens": 0})") == "max_tokens");
  CHECK(sampling_refusal(R"({"max_tokens": -5})") == "max_tokens");
  CHECK(sampling_refusal(R"({"stop": ["a", "b", "c", "d", "e"]})") == "stop");
  CHECK(sampling_refusal(R"({"stop": ""})") == "stop");
  CHECK(sampling_refusal(R"({"stop": ["a", ""]})") == "stop");
  CHECK(sampling_refusal(R"({"stop_token_ids": [-1]})") == "stop_token_ids");
  // The edges themselves are allowed.
  CHECK_NOTHROW(parse_sampling_fields(j(R"({"presence_penalty": -2, "frequency_penalty": 2,
      "min_p": 1, "stop": ["a", "b", "c", "d"], "max_tokens": 1})")));
}

TEST_CASE("sampling fields: prefixes and merging (KServe parameters, gRPC JSON)",
          "[request_parse]") {
  const std::string field = refused_field(
      [] { parse_sampling_fields(j(R"({"top_p": "x"})"), "sampling_parameters."); });
  CHECK(field == "sampling_parameters.top_p");

  SamplingFields f = parse_sampling_fields(j(R"({"temperature": 0.7, "top_k": 5})"));
  merge_sampling_fields(j(R"({"temperature": 0, "max_tokens": 3})"), f);
  CHECK(f.sampling.temperature == 0.0f);  // overridden
  CHECK(f.sampling.top_k == 5);           // kept
  CHECK(f.max_tokens == 3);
}

TEST_CASE("effective_max_tokens: default and requested, capped to the context",
          "[request_parse]") {
  CHECK(effective_max_tokens(std::nullopt, 256, 10, 4096) == 256);
  CHECK(effective_max_tokens(std::nullopt, 256, 4000, 4096) == 96);
  CHECK(effective_max_tokens(7, 256, 10, 4096) == 7);
  CHECK(effective_max_tokens(5000, 256, 10, 4096) == 4086);
  CHECK(effective_max_tokens(std::nullopt, 256, 4095, 4096) == 1);
}

TEST_CASE("completion request: prompt forms", "[request_parse]") {
  CompletionRequest r = parse_completion_request(j(R"({"prompt": "hello", "model": "m"})"));
  CHECK(r.model == "m");
  REQUIRE(r.prompts.size() == 1);
  CHECK(r.prompts[0].text == "hello");
  CHECK(r.prompts[0].ids.empty());
  CHECK(!r.stream);
  CHECK(r.logprobs == -1);
  CHECK(!r.fields.sampling.logprobs);  // none asked for: the engine may sample on a GPU

  r = parse_completion_request(j(R"({"prompt": ["hi"]})"));
  CHECK(r.model.empty());
  REQUIRE(r.prompts.size() == 1);
  CHECK(r.prompts[0].text == "hi");

  r = parse_completion_request(j(R"({"prompt": [1, 15043, 3186]})"));
  REQUIRE(r.prompts.size() == 1);
  CHECK(!r.prompts[0].text);
  CHECK(r.prompts[0].ids == std::vector<int32_t>{1, 15043, 3186});

  r = parse_completion_request(j(R"({"prompt": [[1, 2]]})"));
  REQUIRE(r.prompts.size() == 1);
  CHECK(r.prompts[0].ids == std::vector<int32_t>{1, 2});

  // Batches: strings and id lists, in order.
  r = parse_completion_request(j(R"({"prompt": ["a", [5, 6], "b"]})"));
  REQUIRE(r.prompts.size() == 3);
  CHECK(r.prompts[0].text == "a");
  CHECK(r.prompts[1].ids == std::vector<int32_t>{5, 6});
  CHECK(r.prompts[2].text == "b");
  r = parse_completion_request(j(R"({"prompt": [[1], [2, 3]]})"));
  REQUIRE(r.prompts.size() == 2);
  CHECK(r.prompts[1].ids == std::vector<int32_t>{2, 3});

  CHECK(completion_refusal("{}") == "prompt");
  CHECK(completion_refusal(R"({"prompt": null})") == "prompt");
  CHECK(completion_refusal(R"({"prompt": 5})") == "prompt");
  CHECK(completion_refusal(R"({"prompt": ""})") == "prompt");
  CHECK(completion_refusal(R"({"prompt": []})") == "prompt");
  CHECK(completion_refusal(R"({"prompt": ["a", ""]})") == "prompt");
  CHECK(completion_refusal(R"({"prompt": [[1], []]})") == "prompt");
  CHECK(completion_refusal(R"({"prompt": ["a", 5]})") == "prompt");
  CHECK(completion_refusal(R"({"prompt": [[1], [-1]]})") == "prompt");
  CHECK(completion_refusal(R"({"prompt": ["a", {"t": 1}]})") == "prompt");
  CHECK(completion_refusal(R"({"prompt": [1, "a"]})") == "prompt");
  CHECK(completion_refusal(R"({"prompt": [1, -2]})") == "prompt");
  CHECK(completion_refusal(R"({"prompt": [1.5]})") == "prompt");
  CHECK(completion_refusal(R"({"prompt": {"text": "a"}})") == "prompt");
  CHECK(completion_refusal(R"({"prompt": "a", "model": 3})") == "model");
}

TEST_CASE("completion request: options", "[request_parse]") {
  const CompletionRequest r = parse_completion_request(j(R"({"prompt": "a", "n": 1,
      "echo": false, "best_of": 1, "stream": true, "stream_options": {"include_usage": true},
      "logprobs": 3, "user": "u", "max_tokens": 9, "temperature": 0})"));
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(r.logprobs == 3);
  CHECK(r.fields.sampling.top_logprobs == 3);
  CHECK(r.fields.sampling.logprobs);
  CHECK(r.fields.max_tokens == 9);
  CHECK(r.fields.sampling.temperature == 0.0f);
  CHECK(parse_completion_request(j(R"({"prompt": "a", "logprobs": 0})")).logprobs == 0);
  // logprobs 0 still reports the chosen token's logprob.
  CHECK(parse_completion_request(j(R"({"prompt": "a", "logprobs": 0})")).fields.sampling.logprobs);
  CHECK(parse_completion_request(j(R"({"prompt": "a", "logprobs": 20})")).logprobs == 20);

  // n choices in [1, 128]; best_of in [n, 128] (the best n of best_of, not streamed), and
  // prompts x best_of at most 128.
  CHECK(r.n == 1);
  CHECK(r.best_of == 1);
  CHECK(parse_completion_request(j(R"({"prompt": "a", "n": 128})")).n == 128);
  CHECK(parse_completion_request(j(R"({"prompt": "a", "n": 3, "best_of": 3})")).n == 3);
  const CompletionRequest best =
      parse_completion_request(j(R"({"prompt": "a", "n": 2, "best_of": 5})"));
  CHECK(best.n == 2);
  CHECK(best.best_of == 5);
  CHECK(best.fields.sampling.logprobs);  // the ranking reads the engine's logprobs
  CHECK(best.logprobs == -1);            // ... which the reply does not show
  CHECK(parse_completion_request(j(R"({"prompt": ["a", "b"], "n": 2})")).best_of == 2);
  CHECK(completion_refusal(R"({"prompt": ["a", "b"], "best_of": 65})") == "prompt");
  CHECK(completion_refusal(R"({"prompt": "a", "best_of": 129})") == "best_of");
  CHECK(completion_refusal(R"({"prompt": "a", "best_of": 2, "stream": true})") == "best_of");
  // echo: the prompt is part of the choice; max_tokens 0 only with it.
  const CompletionRequest echo =
      parse_completion_request(j(R"({"prompt": "a", "echo": true, "max_tokens": 0})"));
  CHECK(echo.echo);
  CHECK(echo.prompt_only);
  CHECK(echo.fields.max_tokens == 1);
  CHECK(!parse_completion_request(j(R"({"prompt": "a", "echo": true})")).prompt_only);
  CHECK(completion_refusal(R"({"prompt": "a", "n": 0})") == "n");
  CHECK(completion_refusal(R"({"prompt": "a", "n": 129})") == "n");
  CHECK(completion_refusal(R"({"prompt": "a", "n": -1})") == "n");
  CHECK(completion_refusal(R"({"prompt": "a", "n": "1"})") == "n");
  CHECK(completion_refusal(R"({"prompt": "a", "n": 2.5})") == "n");
  CHECK(completion_refusal(R"({"prompt": "a", "n": 3, "best_of": 2})") == "best_of");
  CHECK(completion_refusal(R"({"prompt": "a", "best_of": 0})") == "best_of");
  CHECK(completion_refusal(R"({"prompt": "a", "echo": "no"})") == "echo");
  CHECK(completion_refusal(R"({"prompt": "a", "echo": true, "max_tokens": -1})") ==
        "max_tokens");
  CHECK(completion_refusal(R"({"prompt": "a", "suffix": "x"})") == "suffix");
  CHECK(completion_refusal(R"({"prompt": "a", "logprobs": 21})") == "logprobs");
  CHECK(completion_refusal(R"({"prompt": "a", "logprobs": -1})") == "logprobs");
  CHECK(completion_refusal(R"({"prompt": "a", "logprobs": true})") == "logprobs");
  CHECK(completion_refusal(R"({"prompt": "a", "stream": "yes"})") == "stream");
  CHECK(completion_refusal(R"({"prompt": "a", "stream_options": 1})") == "stream_options");
  CHECK(completion_refusal(R"({"prompt": "a", "stream_options": {"include_usage": 1}})") ==
        "stream_options.include_usage");
  CHECK(completion_refusal(R"({"prompt": "a", "user": 5})") == "user");
  CHECK(completion_refusal(R"({"prompt": "a", "max_tokens": 0})") == "max_tokens");
  CHECK(completion_refusal(R"({"prompt": "a", "temperature": "x"})") == "temperature");
}

TEST_CASE("chat request: messages", "[request_parse]") {
  const ChatRequest r = parse_chat_request(j(R"({"model": "m", "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null, "name": "bot"}]})"));
  CHECK(r.model == "m");
  REQUIRE(r.messages.size() == 3);
  CHECK(r.messages[0]["role"] == "system");
  CHECK(r.messages[0]["content"] == "be brief");
  CHECK(r.messages[1]["content"] == "hi there");
  CHECK(r.messages[2]["content"] == "");
  CHECK(r.messages[2]["name"] == "bot");  // other keys reach the template
  CHECK(!r.logprobs);
  CHECK(r.fields.sampling.top_logprobs == 0);
  CHECK(!r.fields.sampling.logprobs);

  CHECK(chat_refusal("{}") == "messages");
  CHECK(chat_refusal(R"({"messages": "hi"})") == "messages");
  CHECK(chat_refusal(R"({"messages": []})") == "messages");
  CHECK(chat_refusal(R"({"messages": [5]})") == "messages[0]");
  CHECK(chat_refusal(R"({"messages": [{"content": "x"}]})") == "messages[0].role");
  CHECK(chat_refusal(R"({"messages": [{"role": 1, "content": "x"}]})") == "messages[0].role");
  CHECK(chat_refusal(R"({"messages": [{"role": "user", "content": "a"},
      {"role": "user", "content": 5}]})") == "messages[1].content");
  CHECK(chat_refusal(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})") ==
        "messages[0].content[0].type");
  CHECK(chat_refusal(R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})") ==
        "messages[0].content[0].text");
  CHECK(chat_refusal(R"({"messages": [{"role": "user", "content": ["x"]}]})") ==
        "messages[0].content[0]");
}

TEST_CASE("chat request: options", "[request_parse]") {
  const char* msgs = R"("messages": [{"role": "user", "content": "x"}])";
  auto body = [&](const char* rest) { return std::string("{") + msgs + ", " + rest + "}"; };
  ChatRequest r = parse_chat_request(Json::parse(body(R"("max_tokens": 4, "logprobs": true,
      "top_logprobs": 2, "stream": true, "stream_options": {"include_usage": false},
      "seed": 3, "stop": "\n")")));
  CHECK(r.fields.max_tokens == 4);
  CHECK(r.logprobs);
  CHECK(r.top_logprobs == 2);
  CHECK(r.fields.sampling.top_logprobs == 2);
  CHECK(r.fields.sampling.logprobs);
  CHECK(r.stream);
  CHECK(!r.include_usage);
  CHECK(*r.fields.sampling.seed == 3u);
  CHECK(r.fields.stop == std::vector<std::string>{"\n"});

  r = parse_chat_request(Json::parse(body(R"("max_tokens": 4, "max_completion_tokens": 6)")));
  CHECK(r.fields.max_tokens == 6);

  auto refusal = [&](const char* rest) {
    const std::string b = body(rest);
    return refused_field([&] { parse_chat_request(Json::parse(b)); });
  };
  CHECK(refusal(R"("max_completion_tokens": 0)") == "max_completion_tokens");
  CHECK(refusal(R"("max_completion_tokens": "5")") == "max_completion_tokens");
  CHECK(refusal(R"("max_tokens": -1)") == "max_tokens");
  CHECK(refusal(R"("logprobs": 1)") == "logprobs");
  CHECK(refusal(R"("logprobs": true, "top_logprobs": 21)") == "top_logprobs");
  CHECK(refusal(R"("top_logprobs": 2)") == "top_logprobs");  // needs logprobs: true
  CHECK(parse_chat_request(Json::parse(body(R"("n": 3)"))).n == 3);
  CHECK(refusal(R"("n": 0)") == "n");
  CHECK(refusal(R"("n": 1000)") == "n");
  CHECK(refusal(R"("top_p": 2)") == "top_p");
  CHECK(refusal(R"("model": ["m"])") == "model");
}

namespace {

// `depth` nested arrays around 0, without recursion: [[[...0...]]].
std::string nested_arrays(int depth) {
  return std::string(static_cast<size_t>(depth), '[') + "0" +
         std::string(static_cast<size_t>(depth), ']');
}

}  // namespace

TEST_CASE("parse_json_object: a number past double's range is a 400", "[request_parse]") {
  // Found by tests/fuzz/fuzz_openai_request: nlohmann throws out_of_range, not parse_error,
  // and it escaped as a 500.
  for (const char* text : {R"({"temperature": 1e999})", R"({"a": [-7E7000000011]})"}) {
    INFO(text);
    try {
      parse_json_object(text);
      FAIL("no error");
    } catch (const RequestError& e) {
      CHECK(e.status() == 400);
      CHECK(std::string(e.what()).rfind("invalid JSON: ", 0) == 0);
    }
  }
}

TEST_CASE("parse_json_object: nesting is limited, naming the field", "[request_parse]") {
  using sampan::server::kMaxRequestJsonDepth;
  // The root object is level 1: a field may nest kMaxRequestJsonDepth - 1 arrays.
  const std::string ok = R"({"x": )" + nested_arrays(kMaxRequestJsonDepth - 1) + "}";
  CHECK(parse_json_object(ok)["x"].is_array());
  const std::string deep = R"({"a": 1, "x": )" + nested_arrays(kMaxRequestJsonDepth) + "}";
  CHECK(refused_field([&] { parse_json_object(deep); }) == "x");
  // The crash this guards against: a chat message with an extra field nested 100,000 deep
  // (200 KB), which used to overflow the stack when the message was copied.
  const std::string attack = R"({"messages": [{"role": "user", "content": "hi", "extra": )" +
                             nested_arrays(100000) + "}]}";
  CHECK(refused_field([&] { parse_chat_request(parse_json_object(attack)); }) == "messages");
  // Deep objects, and a deep array as the whole body.
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += R"({"k":)";
  objects += "0" + std::string(100000, '}');
  CHECK(refused_field([&] { parse_json_object(objects); }) == "k");
  try {
    parse_json_object(nested_arrays(100000));
    FAIL("no error");
  } catch (const RequestError& e) {
    CHECK(e.status() == 400);
    CHECK(std::string(e.what()) == "request body nests deeper than 64 levels");
  }
}

TEST_CASE("chat request: tools, tool calls and their options", "[request_parse]") {
  const char* msgs = R"("messages": [{"role": "user", "content": "x"}])";
  auto body = [&](const std::string& rest) { return std::string("{") + msgs + ", " + rest + "}"; };
  auto refusal = [&](const std::string& rest) {
    const std::string b = body(rest);
    return refused_field([&] { parse_chat_request(Json::parse(b)); });
  };
  const char* tool = R"({"type": "function", "function": {"name": "get_weather",
      "description": "d", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})";
  ChatRequest r = parse_chat_request(Json::parse(body(std::string(R"("tools": [)") + tool +
                                                      R"(], "tool_choice": "auto")")));
  REQUIRE(r.tools.is_array());
  CHECK(r.tools[0]["function"]["name"] == "get_weather");
  CHECK(r.tools[0]["function"]["parameters"]["properties"]["city"]["type"] == "string");
  CHECK(parse_chat_request(Json::parse(body(R"("tools": [])"))).tools.is_null());
  CHECK(parse_chat_request(Json::parse(body(R"("tool_choice": "none")"))).tools.is_null());

  CHECK(refusal(R"("tools": "x")") == "tools");
  CHECK(refusal(R"("tools": {"type": "function"})") == "tools");
  CHECK(refusal(R"("tools": [5])") == "tools[0]");
  CHECK(refusal(R"("tools": [{"type": "retrieval"}])") == "tools[0].type");
  CHECK(refusal(R"("tools": [{"type": "function"}])") == "tools[0].function");
  CHECK(refusal(R"("tools": [{"type": "function", "function": "f"}])") == "tools[0].function");
  CHECK(refusal(R"("tools": [{"type": "function", "function": {"name": ""}}])") ==
        "tools[0].function.name");
  CHECK(refusal(R"("tools": [{"type": "function", "function": {"name": 3}}])") ==
        "tools[0].function.name");
  CHECK(refusal(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": []}}])") ==
        "tools[0].function.parameters");
  CHECK(refusal(R"("tools": [{"type": "function", "function": {"name": "f", "description": 1}}])") ==
        "tools[0].function.description");
  // Forced tool calls: "required" (any tool, a list of calls) or one named tool (its arguments),
  // each a grammar; without tools, or naming a tool not given, refused.
  CHECK(refusal(R"("tool_choice": "required")") == "tool_choice");
  CHECK(refusal(R"("tool_choice": "sometimes")") == "tool_choice");
  CHECK(refusal(R"("tool_choice": 1)") == "tool_choice");
  const std::string tools = std::string(R"("tools": [)") + tool + "]";
  {
    const ChatRequest req =
        parse_chat_request(Json::parse(body(tools + R"(, "tool_choice": "required")")));
    CHECK(req.tool_required);
    CHECK(req.forced_tool.empty());
    REQUIRE(req.fields.grammar);
    const sampan::runtime::GrammarMatcher m(*req.fields.grammar);
    CHECK(m.matches(R"([{"name":"get_weather","arguments":{"city":"Oslo"}}])"));
    CHECK(m.matches(R"([{"name":"get_weather","arguments":{}},)"
                    R"({"name":"get_weather","arguments":{}}])"));
    CHECK_FALSE(m.matches(R"([{"name":"get_time","arguments":{}}])"));
    CHECK_FALSE(m.matches(R"([{"name":"get_weather","arguments":{"city":5}}])"));
    CHECK_FALSE(m.matches("[]"));
    // parallel_tool_calls false: exactly one call.
    const ChatRequest one = parse_chat_request(Json::parse(
        body(tools + R"(, "tool_choice": "required", "parallel_tool_calls": false)")));
    CHECK_FALSE(sampan::runtime::GrammarMatcher(*one.fields.grammar)
                    .matches(R"([{"name":"get_weather","arguments":{}},)"
                             R"({"name":"get_weather","arguments":{}}])"));
  }
  {
    const ChatRequest req = parse_chat_request(Json::parse(body(
        tools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})")));
    CHECK(req.forced_tool == "get_weather");
    REQUIRE(req.fields.grammar);
    CHECK(sampan::runtime::GrammarMatcher(*req.fields.grammar).matches(R"({"city":"x"})"));
    CHECK_FALSE(sampan::runtime::GrammarMatcher(*req.fields.grammar).matches(R"([])"));
  }
  CHECK(refusal(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}})") ==
        "tool_choice.function.name");
  CHECK(refusal(tools + R"(, "tool_choice": {"type": "function"})") == "tool_choice.function");
  CHECK(refusal(tools + R"(, "tool_choice": {"function": {"name": "get_weather"}})") ==
        "tool_choice.type");
  CHECK(refusal(R"("tool_choice": {"type": "function", "function": {"name": "get_weather"}})") ==
        "tool_choice");
  // A tool whose schema the grammar cannot follow: refused naming that tool's parameters.
  CHECK(refusal(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": )"
                R"({"type": "object", "properties": {"n": {"type": "string", "pattern": "a\\1"}}}}}],)"
                R"( "tool_choice": "required")") == "tools[0].function.parameters");
  CHECK(refusal(tools + R"(, "tool_choice": "required", )"
                        R"("response_format": {"type": "json_object"})") == "tool_choice");
  CHECK(refusal(R"("parallel_tool_calls": "yes")") == "parallel_tool_calls");
  CHECK(refusal(R"("functions": [])") == "functions");
  CHECK(refusal(R"("function_call": "auto")") == "function_call");

  // response_format on completions too (vLLM's extension): JSON mode or a schema's grammar.
  CHECK(parse_completion_request(Json::parse(
            R"({"prompt": "x", "response_format": {"type": "json_object"}})"))
            .fields.json_object);
  CHECK(parse_completion_request(Json::parse(
            R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": )"
            R"({"name": "n", "schema": {"type": "integer"}}}})"))
            .fields.grammar);
  CHECK(refused_field([] {
          parse_completion_request(Json::parse(R"({"prompt": "x", "response_format": 3})"));
        }) == "response_format");

  // response_format: text, or json_object (JSON mode).
  CHECK_FALSE(parse_chat_request(Json::parse(body(R"("response_format": {"type": "text"})")))
                  .fields.json_object);
  CHECK_FALSE(parse_chat_request(Json::parse(body(R"("max_tokens": 3)"))).fields.json_object);
  CHECK(parse_chat_request(Json::parse(body(R"("response_format": {"type": "json_object"})")))
            .fields.json_object);
  CHECK(refusal(R"("response_format": "json")") == "response_format");
  CHECK(refusal(R"("response_format": {})") == "response_format.type");
  // json_schema: a name as OpenAI spells it, and a schema compiled to a grammar (without one:
  // JSON mode); what the grammar cannot follow is refused naming the schema.
  CHECK(refusal(R"("response_format": {"type": "json_schema", "json_schema": {}})") ==
        "response_format.json_schema.name");
  CHECK(refusal(R"("response_format": {"type": "json_schema"})") ==
        "response_format.json_schema");
  CHECK(refusal(R"("response_format": {"type": "json_schema", "json_schema": {"name": "a b"}})") ==
        "response_format.json_schema.name");
  CHECK(refusal(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x",)"
                R"( "schema": {"type": "object", "minProperties": 1}}})") ==
        "response_format.json_schema.schema");
  CHECK(refusal(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x",)"
                R"( "strict": "yes"}})") == "response_format.json_schema.strict");
  {
    const ChatRequest req = parse_chat_request(Json::parse(body(
        R"("response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": true,)"
        R"( "schema": {"type": "object", "properties": {"z": {"type": "integer"},)"
        R"( "a": {"type": "boolean"}}, "required": ["z", "a"]}}})")));
    REQUIRE(req.fields.grammar);
    CHECK_FALSE(req.fields.json_object);
    const sampan::runtime::GrammarMatcher m(*req.fields.grammar);
    CHECK(m.matches(R"({"z":1,"a":true})"));  // the request's member order, not sorted
    CHECK_FALSE(m.matches(R"({"a":true,"z":1})"));
    const ChatRequest no_schema = parse_chat_request(Json::parse(
        body(R"("response_format": {"type": "json_schema", "json_schema": {"name": "p"}})")));
    CHECK(no_schema.fields.json_object);
    CHECK_FALSE(no_schema.fields.grammar);
  }
  CHECK(refusal(R"("response_format": {"type": "yaml"})") == "response_format.type");

  // logit_bias: token id (canonical decimal) -> bias in [-100, 100], in both APIs.
  CHECK(parse_chat_request(Json::parse(body(R"("logit_bias": {})"))).fields.sampling.logit_bias
            .empty());
  CHECK(parse_chat_request(Json::parse(body(R"("logit_bias": null)"))).fields.sampling.logit_bias
            .empty());
  {
    const auto lb = parse_chat_request(Json::parse(body(
                        R"("logit_bias": {"5": -100, "0": 2.5, "2147483647": 100})")))
                        .fields.sampling.logit_bias;
    std::map<int32_t, float> got(lb.begin(), lb.end());
    REQUIRE(lb.size() == 3);
    CHECK(got == std::map<int32_t, float>{{0, 2.5f}, {5, -100.0f}, {2147483647, 100.0f}});
    const auto lc = parse_completion_request(
                        Json::parse(R"({"prompt": "x", "logit_bias": {"7": 1}})"))
                        .fields.sampling.logit_bias;
    REQUIRE(lc.size() == 1);
    CHECK(lc[0] == std::pair<int32_t, float>(7, 1.0f));
  }
  CHECK(refusal(R"("logit_bias": [1])") == "logit_bias");
  // Keys other than canonical decimal ids: two spellings of one id would add its bias twice.
  for (const char* key : {"x", "-1", "05", " 5", "+5", "5 ", "1e3", "", "2147483648",
                          "99999999999"}) {
    INFO(key);
    CHECK(refusal(fmt::format(R"("logit_bias": {{{}: 1}})", Json(key).dump()).c_str()) ==
          "logit_bias");
  }
  CHECK(refusal(R"("logit_bias": {"5": "1"})") == R"(logit_bias["5"])");
  CHECK(refusal(R"("logit_bias": {"5": 101})") == R"(logit_bias["5"])");
  CHECK(refusal(R"("logit_bias": {"5": -100.5})") == R"(logit_bias["5"])");
  CHECK(refusal(R"("logit_bias": {"5": null})") == R"(logit_bias["5"])");
  CHECK(completion_refusal(R"({"prompt": "x", "logit_bias": {"5": 1000}})") ==
        R"(logit_bias["5"])");
  CHECK(completion_refusal(R"({"prompt": "x", "logit_bias": "no"})") == "logit_bias");

  // Messages with tool calls and tool results.
  r = parse_chat_request(j(R"({"messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
      {"role": "assistant", "tool_calls": [{"id": "c2", "type": "function",
          "function": {"name": "f", "arguments": "not json"}}]}]})"));
  REQUIRE(r.messages.size() == 4);
  // A JSON-object argument string reaches the template as the object (as vLLM hands it).
  CHECK(r.messages[1]["tool_calls"][0]["function"]["arguments"]["city"] == "Paris");
  CHECK(r.messages[2]["tool_call_id"] == "c1");
  CHECK(r.messages[3]["tool_calls"][0]["function"]["arguments"] == "not json");
  auto msg_refusal = [&](const char* m) {
    const std::string b = std::string(R"({"messages": [)") + m + "]}";
    return refused_field([&] { parse_chat_request(Json::parse(b)); });
  };
  CHECK(msg_refusal(R"({"role": "assistant", "tool_calls": "x"})") == "messages[0].tool_calls");
  CHECK(msg_refusal(R"({"role": "assistant", "tool_calls": [1]})") == "messages[0].tool_calls[0]");
  CHECK(msg_refusal(R"({"role": "assistant", "tool_calls": [{"type": "code"}]})") ==
        "messages[0].tool_calls[0].type");
  CHECK(msg_refusal(R"({"role": "assistant", "tool_calls": [{"type": "function"}]})") ==
        "messages[0].tool_calls[0].function");
  CHECK(msg_refusal(R"({"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]})") ==
        "messages[0].tool_calls[0].function.name");
  CHECK(msg_refusal(R"({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 5}}]})") ==
        "messages[0].tool_calls[0].function.arguments");
  CHECK(msg_refusal(R"({"role": "tool", "tool_call_id": 5, "content": "x"})") ==
        "messages[0].tool_call_id");
  CHECK(msg_refusal(R"({"role": "user", "name": ["n"], "content": "x"})") == "messages[0].name");
  // An argument string that nests too deep is refused, naming the key inside it.
  const std::string deep_args = R"({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{\"a\": )" +
                                nested_arrays(100) + R"(}"}}]})";
  CHECK(msg_refusal(deep_args.c_str()) == "messages[0].tool_calls[0].function.arguments.a");
}

// ---- the router before the model has loaded (the e2e test cannot catch that window) ----

namespace {

struct Answer {
  int status = 0;
  std::string body;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;
};

// Records the one respond() a request gets; streaming is not expected without an engine.
class RecordingWriter : public sampan::server::ResponseWriter {
 public:
  explicit RecordingWriter(Answer* out) : out_(out) {}
  void respond(int status, std::string body, std::string content_type,
               std::vector<std::pair<std::string, std::string>> headers) override {
    ++responses;
    *out_ = Answer{status, std::move(body), std::move(content_type), std::move(headers)};
  }
  void start_stream(int, std::string, std::vector<std::pair<std::string, std::string>>) override {
    FAIL("no stream expected");
  }
  void write(std::string) override { FAIL("no stream expected"); }
  void end() override { FAIL("no stream expected"); }
  bool closed() const override { return false; }
  void on_close(std::function<void()>) override {}
  int responses = 0;

 private:
  Answer* out_;
};

Answer call(const sampan::server::HttpHandler& h, const std::string& method,
            const std::string& path, const std::string& body = "") {
  sampan::server::HttpRequest req;
  req.method = method;
  req.target = path;
  req.path = path;
  req.body = body;
  req.request_id = "t1";
  Answer a;
  auto w = std::make_shared<RecordingWriter>(&a);
  h(req, w);
  CHECK(w->responses == 1);
  return a;
}

}  // namespace

TEST_CASE("router: while the model loads", "[router]") {
  sampan::server::ModelHost host("tiny", 16);
  sampan::server::ServeMetrics metrics;
  const auto h = sampan::server::make_api_router(host, metrics);

  CHECK(call(h, "GET", "/v2/health/live").status == 200);
  CHECK(call(h, "GET", "/v2/health/ready").status == 503);
  CHECK(call(h, "GET", "/health").status == 503);
  CHECK(call(h, "GET", "/v2/models/tiny/ready").status == 503);
  CHECK(call(h, "GET", "/v2/models/other/ready").status == 404);

  Answer a = call(h, "POST", "/v1/completions", R"({"prompt": "hi"})");
  CHECK(a.status == 503);
  CHECK(Json::parse(a.body)["error"]["message"].get<std::string>().find("loading") !=
        std::string::npos);
  a = call(h, "POST", "/v2/models/tiny/infer",
           R"({"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1],
               "data": ["hi"]}]})");
  CHECK(a.status == 503);
  CHECK(Json::parse(a.body)["error"].is_string());  // KServe's error shape

  // Validation needs no engine: bad input is still named precisely.
  a = call(h, "POST", "/v1/completions", R"({"prompt": "hi", "top_k": "x"})");
  CHECK(a.status == 400);
  CHECK(Json::parse(a.body)["error"]["param"] == "top_k");
  a = call(h, "POST", "/v1/chat/completions", "{bad");
  CHECK(a.status == 400);
  CHECK(Json::parse(a.body)["error"]["message"].get<std::string>().rfind("invalid JSON", 0) == 0);

  a = call(h, "GET", "/v1/models");
  CHECK(a.status == 200);
  CHECK(Json::parse(a.body)["data"][0]["id"] == "tiny");

  host.set_draining();
  CHECK(call(h, "GET", "/v2/health/live").status == 200);
  CHECK(call(h, "GET", "/health").status == 503);
}

TEST_CASE("router: routes, methods, metrics", "[router]") {
  sampan::server::ModelHost host("tiny", 16);
  sampan::server::ServeMetrics metrics;
  const auto h = sampan::server::make_api_router(host, metrics);

  Answer a = call(h, "GET", "/v1/completions");
  CHECK(a.status == 405);
  bool allow_post = false;
  for (const auto& [k, v] : a.headers) allow_post |= (k == "Allow" && v == "POST");
  CHECK(allow_post);
  CHECK(call(h, "POST", "/v1/models").status == 405);
  CHECK(call(h, "POST", "/v2/health/ready").status == 405);
  CHECK(call(h, "GET", "/v2/models/tiny/infer").status == 405);
  CHECK(call(h, "GET", "/v1/nothing").status == 404);
  CHECK(call(h, "GET", "/nothing").status == 404);
  CHECK(call(h, "GET", "/v2/models/tiny/versions/2").status == 404);
  CHECK(call(h, "GET", "/v2/repository").status == 404);

  a = call(h, "GET", "/v2/models/tiny/versions/1");
  CHECK(a.status == 200);
  const Json meta = Json::parse(a.body);
  CHECK(meta["name"] == "tiny");
  CHECK(meta["platform"] == "sampan");
  CHECK(meta["inputs"][0]["name"] == "text_input");
  CHECK(meta["outputs"][0]["name"] == "text_output");

  a = call(h, "GET", "/v2");
  CHECK(a.status == 200);
  CHECK(Json::parse(a.body)["name"] == "sampan");

  a = call(h, "GET", "/metrics");
  CHECK(a.status == 200);
  CHECK(a.content_type == "text/plain; version=0.0.4; charset=utf-8");
  // Every answer above was counted under its API and status.
  const std::string m = metrics.render();
  CHECK(m.find("api=\"openai\",code=\"405\"") != std::string::npos);
  CHECK(m.find("api=\"kserve_rest\",code=\"404\"") != std::string::npos);
}
