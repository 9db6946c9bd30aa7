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
#include "tests/fuzz/grammar_walk.h"

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
  // A walk (grammar_walk.h): stop when complete (half the time) or after 256 bytes. A prefix
  // it cannot extend must be complete (unproductive alternatives are pruned at compile time)
  // unless nested to the depth cap.
  const GrammarMatcher m(*g);
  if (m.start().empty()) std::abort();  // compile promises a generable root
  const sampan::fuzz::GrammarWalk w = sampan::fuzz::walk_grammar(m, data, size, 256, 2);
  const GrammarState& s = w.state;
  const std::string& out = w.text;
  if (w.stuck) {
    // A prefix the grammar took that cannot be completed: only where the depth cap cut the
    // continuations off (the recogniser then accepts less, as documented).
    size_t deepest = 0;
    for (size_t i = 0; i < s.flat.size(); i += s.flat[i] + 1) {
      deepest = std::max<size_t>(deepest, s.flat[i]);
    }
    if (!m.done(s) && deepest + 8 < Grammar::kMaxStackDepth) std::abort();
  }
  if (!m.done(s)) return 0;
  if (!nlohmann::json::accept(out)) std::abort();  // the grammar took a text that is not JSON
  return 0;
}
