// The JSON Schema compiler and grammar recogniser (engine/runtime/json_schema.h, grammar.h),
// fed arbitrary schema text: in serving it comes from any client (response_format json_schema,
// tool parameters). Besides crashes, hangs and runaway memory (the rule cap, nesting and
// left-recursion checks), a differential check: a text walked out of a compiled grammar byte by
// byte that the recogniser calls complete must be JSON for nlohmann.
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <string>

#include "engine/core/error.h"
#include "engine/runtime/json_schema.h"
#include "tests/fuzz/fuzz_util.h"

using namespace sampan::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(sampan::fuzz::as_text(data, size));
  std::shared_ptr<const Grammar> g;
  try {
    g = compile_json_schema(text, "schema");
  } catch (const sampan::Error& e) {
    if (e.code() != sampan::ErrorCode::kInvalidArgument || e.field() != "schema") std::abort();
    return 0;
  }
  // A walk: at each position one of the allowed bytes, chosen by a generator seeded from the
  // input; stop when complete (half the time) or after 400 bytes.
  const GrammarMatcher m(*g);
  GrammarState s = m.start();
  if (s.empty()) std::abort();  // compile promises a generable root
  uint64_t seed = 0x9E3779B97F4A7C15ull ^ size;
  for (size_t i = 0; i < size; ++i) seed = (seed ^ data[i]) * 0x100000001B3ull;
  std::string out;
  for (int n = 0; n < 400; ++n) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    if (m.done(s) && (seed >> 63)) break;
    std::vector<std::pair<uint8_t, GrammarState>> next;
    for (int b = 0; b < 256; ++b) {
      GrammarState t = m.step(s, static_cast<uint8_t>(b));
      if (!t.empty()) next.emplace_back(static_cast<uint8_t>(b), std::move(t));
    }
    if (next.empty()) {
      if (!m.done(s)) std::abort();  // a prefix the grammar took that cannot be completed
      break;
    }
    auto& [b, t] = next[(seed >> 33) % next.size()];
    out.push_back(static_cast<char>(b));
    s = std::move(t);
  }
  if (!m.done(s)) return 0;
  if (!nlohmann::json::accept(out)) std::abort();  // the grammar took a text that is not JSON
  return 0;
}
