// JSON Schema `minimum` / `maximum` / `exclusiveMinimum` / `exclusiveMaximum` as a byte grammar
// (grammar.h): the rule derives the JSON numbers (or integers) within the bounds.
//
// What a caller may rely on: every text the rule derives is a JSON number whose exact decimal
// value lies within the bounds; integers are canonical (no leading zeros, "-0" allowed), with up
// to 16 integer digits and 16 fraction digits and no exponent. For `integer` any bound works
// (the range is rounded inward); for `number` the bounds must be integers (a fractional bound
// would need digit-by-digit fraction ranges: the caller refuses it). `multipleOf` an integer
// m: the multiples of m, written as integers (Python's jsonschema checks a float multipleOf
// with a floating-point division, so a fractional m is left to the caller to refuse).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "engine/runtime/grammar.h"

namespace sampan::runtime {

struct NumberBound {
  int64_t value;
  bool strict;  // exclusive
};

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
