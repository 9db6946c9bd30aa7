// JSON mode's byte-level recogniser (engine/runtime/json_grammar.h), fed arbitrary bytes (in
// serving its input is the byte strings of a model file's vocabulary). Besides crashes, a
// differential check against nlohmann's parser: a text the recogniser takes whole and calls
// complete must be one JSON object for nlohmann too — unless it holds \u escapes (nlohmann
// refuses lone surrogates that Python's json and JSON mode take) or a number past double's
// range (valid JSON that nlohmann refuses with out_of_range 406).
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <string>

#include "engine/runtime/json_grammar.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(sampan::fuzz::as_text(data, size));
  sampan::runtime::JsonState s;
  bool taken = true;
  for (const char c : text) {
    if (!sampan::runtime::json_step(s, static_cast<uint8_t>(c))) {
      taken = false;
      break;
    }
  }
  (void)sampan::runtime::json_state_hash(s);
  if (!taken || !sampan::runtime::json_done(s) || text.find("\\u") != std::string::npos) return 0;
  try {
    if (!nlohmann::json::parse(text).is_object()) std::abort();
  } catch (const nlohmann::json::out_of_range& e) {
    if (e.id != 406) std::abort();
  } catch (const nlohmann::json::exception&) {
    std::abort();  // the recogniser took a text that is not JSON
  }
  return 0;
}
