// The OpenAI request bodies: the input is an HTTP body, parsed as every route does (depth
// limited) and validated as a completion and as a chat request; accepted chat requests are
// copied and dumped as the server does with them.
#include "server/request_parse.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sampan::server;
  Json body;
  try {
    body = parse_json_object(sampan::fuzz::as_text(data, size));
  } catch (const RequestError&) {
    return 0;
  }
  try {
    (void)parse_completion_request(body);
  } catch (const RequestError&) {
  }
  try {
    const ChatRequest r = parse_chat_request(body);
    Json copy = r.messages;
    (void)copy.dump(-1, ' ', false, Json::error_handler_t::replace);
    (void)r.tools.dump(-1, ' ', false, Json::error_handler_t::replace);
  } catch (const RequestError&) {
  }
  return 0;
}
