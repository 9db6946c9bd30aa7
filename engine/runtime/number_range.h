// JSON Schema `minimum` / `maximum` / `exclusiveMinimum` / `exclusiveMaximum` as a byte grammar
// (grammar.h): the rule derives the JSON numbers (or integers) within the bounds.
//
// What a caller may rely on: every text the rule derives is a JSON number whose exact decimal
// value lies within the bounds; integers are canonical (no leading zeros, "-0" allowed), with up
// to 16 integer digits and 16 fraction digits and no exponent. For `integer` any bound works
// (the range is rounded inward); for `number` any decimal bound, compared digit by digit (with
// a bound from a double, the texts generated are those whose exact value is within the bound's
// shortest decimal form, so a validator comparing doubles agrees). `multipleOf` an integer
// m: the multiples of m, written as integers (Python's jsonschema checks a float multipleOf
// with a floating-point division, so a fractional m is left to the caller to refuse).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "engine/runtime/grammar.h"

namespace sampan::runtime {

// A bound: (negative ? -1 : 1) * (whole + 0.frac), exclusive when strict. frac: the digits
// after the point, no trailing zeros.
struct NumberBound {
  bool negative = false;
  int64_t whole = 0;  // >= 0
  std::string frac;
  bool strict = false;

  static NumberBound integer(int64_t v, bool strict) {
    // -2^63 has no magnitude in int64: one past the largest written is as good.
    const int64_t mag = v == INT64_MIN ? INT64_MAX : (v < 0 ? -v : v);
    return {v < 0, mag, "", strict};
  }
};

// A bound from a JSON number's text ("2.5", "-0.125", "1e-05", "1.5e+20"); nullopt when it is
// not one. Magnitudes past the 16 digits written are kept as they are (the range clamps).
std::optional<NumberBound> decimal_bound(std::string_view text, bool strict);

// Largest magnitude written: 16 digits.
inline constexpr int64_t kMaxNumberMagnitude = 9'999'999'999'999'999;

// The rule deriving the numbers (integers when `integer`) v with lo <= v <= hi (< / > when
// strict; no bound: unbounded on that side) that are multiples of `multiple` (1: any; above 1
// only integers are written, digit by digit beside a residue automaton of `multiple` states:
// keep it small, the caller caps it); nullopt when no such text exists. Bounds beyond
// +-kMaxNumberMagnitude are clamped to it (the grammar writes no longer number). `new_rule`
// makes each rule, so the caller can bound them.
std::optional<uint32_t> add_number_range(Grammar& g, std::optional<NumberBound> lo,
                                         std::optional<NumberBound> hi, bool integer,
                                         int64_t multiple,
                                         const std::function<uint32_t()>& new_rule);

}  // namespace sampan::runtime
