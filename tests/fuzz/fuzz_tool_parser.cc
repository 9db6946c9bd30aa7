// Tool calls read out of a model's reply (server/tool_parser.h): the reply is text a model made
// from a client's prompt, so anything. First byte: the format and the stream's piece sizes;
// the rest: the reply. Besides crashes, a differential check: the calls found by streaming the
// reply in pieces are the calls found in it whole, and a reply without calls comes back whole.
#include <cstdlib>
#include <string>

#include "server/tool_parser.h"
#include "tests/fuzz/fuzz_util.h"

using namespace sampan::server;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const ToolCallFormat formats[] = {ToolCallFormat::kNone, ToolCallFormat::kHermes,
                                    ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral};
  const ToolCallFormat f = formats[data[0] & 3];
  const size_t piece = 1 + (data[0] >> 2);
  const std::string text(sampan::fuzz::as_text(data + 1, size - 1));
  const std::optional<ParsedToolCalls> whole = parse_tool_calls(f, text);
  ToolCallStream s(f);
  std::string sent;
  for (size_t i = 0; i < text.size(); i += piece) {
    sent += s.push(std::string_view(text).substr(i, piece));
  }
  std::string rest;
  const std::optional<ParsedToolCalls> streamed = s.finish(&rest);
  if (whole.has_value() != streamed.has_value()) std::abort();
  if (whole && whole->calls != streamed->calls) std::abort();
  if (!streamed && sent + rest != text) std::abort();  // nothing lost or changed
  return 0;
}
