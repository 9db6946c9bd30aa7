// A walk out of a grammar (engine/runtime/grammar.h) for the fuzz targets whose parsers make
// one (fuzz_json_schema, fuzz_string_pattern): at each position the first byte the grammar
// allows in an order seeded from the input, stopping at a complete text with probability
// `stop_odds` / 4 per byte, or after `max_bytes`.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "engine/runtime/grammar.h"

namespace sampan::fuzz {

struct GrammarWalk {
  std::string text;                 // the bytes taken
  runtime::GrammarState state;      // after them
  bool stuck = false;               // no byte could extend the text
};

inline GrammarWalk walk_grammar(const runtime::GrammarMatcher& m, const uint8_t* data,
                                size_t size, int max_bytes, unsigned stop_odds) {
  GrammarWalk w{std::string(), m.start(), false};
  uint64_t seed = 0x9E3779B97F4A7C15ull ^ size;
  for (size_t i = 0; i < size; ++i) seed = (seed ^ data[i]) * 0x100000001B3ull;
  for (int n = 0; n < max_bytes && !w.state.empty(); ++n) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    if (m.done(w.state) && (seed >> 62) < stop_odds) break;
    // The first allowed byte in a seeded order (an odd stride visits all 256).
    const unsigned start = static_cast<unsigned>(seed >> 40) & 255u;
    const unsigned stride = (static_cast<unsigned>(seed >> 48) & 254u) | 1u;
    bool moved = false;
    for (unsigned k = 0; k < 256 && !moved; ++k) {
      const auto b = static_cast<uint8_t>((start + k * stride) & 255u);
      runtime::GrammarState t = m.step(w.state, b);
      if (t.empty()) continue;
      w.text.push_back(static_cast<char>(b));
      w.state = std::move(t);
      moved = true;
    }
    if (!moved) {
      w.stuck = true;
      break;
    }
  }
  return w;
}

}  // namespace sampan::fuzz
