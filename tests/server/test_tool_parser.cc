// Tool calls parsed out of free text (server/tool_parser.h), against the formats the real chat
// templates of ../shared/fixtures teach: each template renders an assistant message with
// tool_calls (what the model was trained to write); the parser, whole and streamed in random
// pieces, must give back those calls. Plus the formats' edge cases and what stays content.
#include <catch2/catch.hpp>

#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "engine/chat/chat_template.h"
#include "server/tool_parser.h"

using namespace sampan;
using namespace sampan::server;
using Json = nlohmann::ordered_json;

namespace {

std::string read_template(const std::string& name) {
  const std::string path =
      std::string(SAMPAN_SOURCE_DIR) + "/../shared/fixtures/chat_templates/" + name + ".jinja";
  std::ifstream f(path);
  INFO(path);
  REQUIRE(f.good());  // CI has ../shared: a missing fixture fails
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// What the model writes for `calls`: the template's rendering of the conversation with the
// assistant's tool_calls message, past the rendering that ends with the generation prompt, up
// to the end-of-turn marker.
std::string assistant_text(const std::string& tmpl, const Json& calls, const char* eot) {
  const chat::Template t = chat::Template::parse(tmpl, "t");
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "d", "parameters": {"type": "object", "properties": {
      "city": {"type": "string"}}}}}])");
  Json msgs = Json::array({Json{{"role", "user"}, {"content", "Weather in Oslo and Rome?"}}});
  Json vars{{"messages", msgs}, {"tools", tools}, {"add_generation_prompt", true},
            {"bos_token", "<s>"}, {"eos_token", "</s>"}};
  const std::string before = t.render(vars);
  Json tc = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    tc.push_back({{"id", "abcdefgh" + std::to_string(i)},
                  {"type", "function"},
                  {"function", {{"name", calls[i][0]}, {"arguments", calls[i][1]}}}});
  }
  msgs.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", tc}});
  vars["messages"] = msgs;
  vars["add_generation_prompt"] = false;
  const std::string after = t.render(vars);
  INFO(after);
  REQUIRE(after.substr(0, before.size()) == before);
  std::string reply = after.substr(before.size());
  const size_t end = reply.rfind(eot);
  REQUIRE(end != std::string::npos);
  return reply.substr(0, end);
}

void check_calls(const ParsedToolCalls& p, const Json& calls) {
  REQUIRE(p.calls.size() == calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    CHECK(p.calls[i]["name"] == calls[i][0]);
    CHECK(Json::parse(p.calls[i]["arguments"].get<std::string>()) == calls[i][1]);
  }
}

// The stream in random pieces: content sent before the calls plus finish() equals the whole.
void check_stream(ToolCallFormat f, const std::string& text, const Json& calls, uint32_t seed) {
  std::mt19937 rng(seed);
  ToolCallStream s(f);
  std::string sent;
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::min<size_t>(text.size() - i, 1 + rng() % 7);
    sent += s.push(std::string_view(text).substr(i, n));
    i += n;
  }
  std::string rest;
  const std::optional<ParsedToolCalls> p = s.finish(&rest);
  INFO(text);
  REQUIRE(p.has_value());
  check_calls(*p, calls);
  CHECK(rest.empty());
  CHECK(sent.find("tool_call") == std::string::npos);  // no call text leaks into content
  CHECK(sent.find("get_weather") == std::string::npos);
}

}  // namespace

TEST_CASE("tool parser: the real templates' tool calls parse back, whole and streamed",
          "[tool_parser]") {
  const Json one = Json::parse(R"([["get_weather", {"city": "Oslo"}]])");
  const Json two = Json::parse(R"([["get_weather", {"city": "Oslo"}],
                                    ["get_weather", {"city": "Rome; Italy"}]])");
  struct Case {
    const char* name;
    ToolCallFormat format;
    const char* eot;
    bool parallel;
  };
  for (const Case& c : {Case{"Qwen-Qwen2.5-7B-Instruct", ToolCallFormat::kHermes, "<|im_end|>",
                             true},
                        Case{"meta-llama-Llama-3.1-8B-Instruct", ToolCallFormat::kLlama3Json,
                             "<|eot_id|>", false},
                        Case{"mistralai-Mistral-Nemo-Instruct-2407", ToolCallFormat::kMistral,
                             "</s>", true}}) {
    INFO(c.name);
    const std::string tmpl = read_template(c.name);
    CHECK(detect_tool_call_format(tmpl) == c.format);
    for (const Json* calls : {&one, &two}) {
      if (calls == &two && !c.parallel) continue;  // Llama 3.1's template allows one call
      const std::string text = assistant_text(tmpl, *calls, c.eot);
      INFO(text);
      const std::optional<ParsedToolCalls> p = parse_tool_calls(c.format, text);
      REQUIRE(p.has_value());
      check_calls(*p, *calls);
      CHECK(p->content.empty());
      for (uint32_t seed = 0; seed < 20; ++seed) check_stream(c.format, text, *calls, seed);
      // The marker a tokenizer treats as special may be missing from the decoded text.
      for (const char* tag : {"[TOOL_CALLS]", "<|python_tag|>"}) {
        const size_t at = text.find(tag);
        if (at == std::string::npos) continue;
        const std::string bare = text.substr(0, at) + text.substr(at + std::string(tag).size());
        REQUIRE(parse_tool_calls(c.format, bare).has_value());
        check_calls(*parse_tool_calls(c.format, bare), *calls);
      }
    }
  }
  // Templates without a call format: nothing parsed.
  CHECK(detect_tool_call_format(read_template("google-gemma-2-2b-it")) == ToolCallFormat::kNone);
}

TEST_CASE("tool parser: content around calls, and replies that are not calls", "[tool_parser]") {
  const auto h = ToolCallFormat::kHermes;
  auto p = parse_tool_calls(h, "Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": "
                               "{\"x\": 1}}\n</tool_call>\nDone.");
  REQUIRE(p);
  CHECK(p->content == "Let me check.\n\nDone.");
  CHECK(p->calls[0]["arguments"] == R"({"x":1})");
  // Unclosed at the end (the model stopped after the object): still a call.
  p = parse_tool_calls(h, "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}");
  REQUIRE(p);
  CHECK(p->calls[0]["arguments"] == "{}");
  // Malformed or nameless calls, and plain text: no calls, the reply stays content.
  for (const char* t : {"<tool_call>{\"name\": \"f\", \"arguments\": {}</tool_call>",
                        "<tool_call>{\"arguments\": {}}</tool_call>",
                        "<tool_call>{\"name\": 3}</tool_call>", "no calls here", ""}) {
    CHECK_FALSE(parse_tool_calls(h, t));
  }
  const auto l = ToolCallFormat::kLlama3Json;
  p = parse_tool_calls(l, R"({"name": "a", "parameters": {"s": "x;y"}}; {"name": "b"})");
  REQUIRE(p);
  REQUIRE(p->calls.size() == 2);
  CHECK(p->calls[0]["arguments"] == R"({"s":"x;y"})");
  CHECK(p->calls[1]["arguments"] == "{}");
  CHECK_FALSE(parse_tool_calls(l, "The answer is {\"name\": \"a\"}"));
  CHECK_FALSE(parse_tool_calls(l, "{\"city\": \"Oslo\"}"));
  const auto m = ToolCallFormat::kMistral;
  CHECK_FALSE(parse_tool_calls(m, "[1, 2]"));
  CHECK_FALSE(parse_tool_calls(m, "[]"));
  CHECK_FALSE(parse_tool_calls(ToolCallFormat::kNone, "<tool_call>{\"name\": \"f\"}"));

  // Streams of plain text pass through whole, a held false start comes back from finish().
  for (const auto f : {h, l, m}) {
    ToolCallStream s(f);
    std::string sent = s.push("  Hello");
    sent += s.push(" world <tool");
    sent += s.push("s are fun");
    std::string rest;
    CHECK_FALSE(s.finish(&rest));
    CHECK(sent + rest == "  Hello world <tools are fun");
  }
  ToolCallStream s(l);
  CHECK(s.push("{\"na").empty());
  CHECK(s.push("me\": 5}").empty());
  std::string rest;
  CHECK_FALSE(s.finish(&rest));
  CHECK(rest == "{\"name\": 5}");
  CHECK(tool_call_format_from_name("hermes") == h);
  CHECK_FALSE(tool_call_format_from_name("auto"));
}
