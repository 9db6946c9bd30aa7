// The JSON Schema compiler and grammar recogniser (engine/runtime/json_schema.h, grammar.h),
// fed arbitrary schema text: in serving it comes from any client (response_format json_schema,
// tool parameters). Besides crashes, hangs and runaway memory (the rule cap, nesting and
// left-recursion checks), a differential check: a text walked out of a compiled grammar byte by
// byte that the recogniser calls complete must be JSON for nlohmann.
#include <nlohmann/json.hpp>

#include <algorithm>
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
  // input; stop when complete (half the time) or after 256 bytes. A prefix it cannot extend
  // must be complete (unproductive alternatives are pruned at compile time) unless nested to
  // the depth cap.
  const GrammarMatcher m(*g);
  GrammarState s = m.start();
  if (s.empty()) std::abort();  // compile promises a generable root
  uint64_t seed = 0x9E3779B97F4A7C15ull ^ size;
  for (size_t i = 0; i < size; ++i) seed = (seed ^ data[i]) * 0x100000001B3ull;
  std::string out;
  for (int n = 0; n < 256; ++n) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    if (m.done(s) && (seed >> 63)) break;
    // The first allowed byte in a seeded order (an odd stride visits all 256).
    const unsigned start = static_cast<unsigned>(seed >> 40) & 255u;
    const unsigned stride = (static_cast<unsigned>(seed >> 48) & 254u) | 1u;
    bool moved = false;
    for (unsigned k = 0; k < 256 && !moved; ++k) {
      const auto b = static_cast<uint8_t>((start + k * stride) & 255u);
      GrammarState t = m.step(s, b);
      if (t.empty()) continue;
      out.push_back(static_cast<char>(b));
      s = std::move(t);
      moved = true;
    }
    if (!moved) {
      // A prefix the grammar took that cannot be completed: only where the depth cap cut the
      // continuations off (the recogniser then accepts less, as documented).
      size_t deepest = 0;
      for (size_t i = 0; i < s.flat.size(); i += s.flat[i] + 1) {
        deepest = std::max<size_t>(deepest, s.flat[i]);
      }
      if (!m.done(s) && deepest + 8 < Grammar::kMaxStackDepth) std::abort();
      break;
    }
  }
  if (!m.done(s)) return 0;
  if (!nlohmann::json::accept(out)) std::abort();  // the grammar took a text that is not JSON
  return 0;
}
