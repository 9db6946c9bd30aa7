#include "engine/runtime/number_range.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace sampan::runtime {
namespace {

using Sym = Grammar::Symbol;
using Alts = std::vector<std::vector<Sym>>;

class RangeBuilder {
 public:
  RangeBuilder(Grammar& g, const std::function<uint32_t()>& new_rule)
      : g_(g), new_rule_(new_rule) {}

  uint32_t rule(Alts alts) {
    const uint32_t r = new_rule_();
    for (auto& a : alts) g_.add_alt(r, std::move(a));
    return r;
  }

  // The magnitude written with optional sign already read: m >= L (> when strict_l) and
  // m <= U (< when strict_u; no U: unbounded), as integer digits and (numbers) a fraction.
  Alts magnitude(int64_t l, bool strict_l, std::optional<int64_t> u, bool strict_u, bool integer) {
    if (u && *u > kMaxNumberMagnitude) u = kMaxNumberMagnitude, strict_u = false;
    const int64_t top = u ? *u : kMaxNumberMagnitude;
    if (l > top) return {};
    if (integer) {
      const int64_t a = l + strict_l, b = top - (u && strict_u);
      if (a > b) return {};
      return {{digits_in(a, b)}};
    }
    Alts alts;
    if (l + 1 <= top - 1) alts.push_back({digits_in(l + 1, top - 1), frac_any()});
    if (u && *u == l) {
      if (!strict_l && !strict_u) alts.push_back({literal(l), frac_zero()});
      return alts;
    }
    alts.push_back({literal(l), strict_l ? frac_nonzero() : frac_any()});
    if (u && !strict_u) alts.push_back({literal(*u), frac_zero()});
    return alts;
  }

 private:
  uint32_t literal(int64_t v) {
    std::vector<Sym> seq;
    for (const char c : std::to_string(v)) seq.push_back(g_.byte(static_cast<uint8_t>(c)));
    return rule({std::move(seq)});
  }

  // Up to n more digits.
  uint32_t upto(int n) {
    uint32_t r = rule({{}});
    for (int i = 0; i < n; ++i) r = rule({{}, {g_.byte_range('0', '9'), r}});
    return r;
  }

  uint32_t frac_any() {
    if (!frac_any_) frac_any_ = rule({{}, {g_.byte('.'), g_.byte_range('0', '9'), upto(15)}});
    return *frac_any_;
  }
  uint32_t frac_zero() {
    if (frac_zero_) return *frac_zero_;
    uint32_t zeros = rule({{}});
    for (int i = 0; i < 15; ++i) zeros = rule({{}, {g_.byte('0'), zeros}});
    frac_zero_ = rule({{}, {g_.byte('.'), g_.byte('0'), zeros}});
    return *frac_zero_;
  }
  // '.' and up to 16 digits, one of them not 0.
  uint32_t frac_nonzero() {
    if (frac_nonzero_) return *frac_nonzero_;
    uint32_t nz = rule({{g_.byte_range('1', '9'), upto(0)}});
    for (int n = 2; n <= 16; ++n) {
      nz = rule({{g_.byte('0'), nz}, {g_.byte_range('1', '9'), upto(n - 1)}});
    }
    frac_nonzero_ = rule({{g_.byte('.'), nz}});
    return *frac_nonzero_;
  }

  // Canonical decimal integers in [lo, hi] (0 <= lo <= hi <= kMaxNumberMagnitude).
  uint32_t digits_in(int64_t lo, int64_t hi) {
    Alts alts;
    int64_t first = 0, last = 9;  // the d-digit numbers
    for (int d = 1; d <= 16; ++d) {
      const int64_t a = std::max(lo, first), b = std::min(hi, last);
      if (a <= b) alts.push_back({same_length(std::to_string(a), std::to_string(b))});
      first = last + 1;
      last = last * 10 + 9;
    }
    return rule(std::move(alts));
  }

  // Digit strings of a's length from a to b (a <= b).
  uint32_t same_length(const std::string& a, const std::string& b) {
    if (auto it = memo_.find({a, b}); it != memo_.end()) return it->second;
    const auto a0 = static_cast<uint8_t>(a[0]), b0 = static_cast<uint8_t>(b[0]);
    Alts alts;
    if (a.size() == 1) {
      alts.push_back({g_.byte_range(a0, b0)});
    } else if (a0 == b0) {
      alts.push_back({g_.byte(a0), same_length(a.substr(1), b.substr(1))});
    } else {
      const std::string nines(a.size() - 1, '9'), zeros(a.size() - 1, '0');
      const bool full_a = a.substr(1) == zeros, full_b = b.substr(1) == nines;
      // Leading digits whose every continuation is in range share one alternative.
      const uint8_t from = full_a ? a0 : a0 + 1, to = full_b ? b0 : b0 - 1;
      if (!full_a) alts.push_back({g_.byte(a0), same_length(a.substr(1), nines)});
      if (from <= to) alts.push_back({g_.byte_range(from, to), same_length(zeros, nines)});
      if (!full_b) alts.push_back({g_.byte(b0), same_length(zeros, b.substr(1))});
    }
    const uint32_t r = rule(std::move(alts));
    memo_.emplace(std::make_pair(a, b), r);
    return r;
  }

  Grammar& g_;
  const std::function<uint32_t()>& new_rule_;
  std::map<std::pair<std::string, std::string>, uint32_t> memo_;
  std::optional<uint32_t> frac_any_, frac_zero_, frac_nonzero_;
};

}  // namespace

std::optional<uint32_t> add_number_range(Grammar& g, std::optional<NumberBound> lo,
                                         std::optional<NumberBound> hi, bool integer,
                                         const std::function<uint32_t()>& new_rule) {
  RangeBuilder b(g, new_rule);
  auto clamp = [](std::optional<NumberBound>& x) {
    if (x && x->value > kMaxNumberMagnitude) x = NumberBound{kMaxNumberMagnitude + 1, false};
    if (x && x->value < -kMaxNumberMagnitude) x = NumberBound{-kMaxNumberMagnitude - 1, false};
  };
  clamp(lo);
  clamp(hi);
  Alts alts;
  // No sign: v = m.
  const bool nonneg_possible = !hi || hi->value > 0 || (hi->value == 0 && !hi->strict);
  if (nonneg_possible) {
    const int64_t l = lo && lo->value >= 0 ? lo->value : 0;
    const bool strict_l = lo && lo->value >= 0 && lo->strict;
    std::optional<int64_t> u;
    if (hi) u = hi->value;
    for (auto& a : b.magnitude(l, strict_l, u, hi && hi->strict, integer)) {
      alts.push_back(std::move(a));
    }
  }
  // '-': v = -m.
  const bool neg_possible = !lo || lo->value < 0 || (lo->value == 0 && !lo->strict);
  if (neg_possible) {
    const int64_t l = hi && hi->value <= 0 ? -hi->value : 0;
    const bool strict_l = hi && hi->value <= 0 && hi->strict;
    std::optional<int64_t> u;
    if (lo) u = -lo->value;
    const uint32_t minus_sign = b.rule({{g.byte('-')}});
    for (auto& a : b.magnitude(l, strict_l, u, lo && lo->strict, integer)) {
      a.insert(a.begin(), minus_sign);
      alts.push_back(std::move(a));
    }
  }
  if (alts.empty()) return std::nullopt;
  return b.rule(std::move(alts));
}

}  // namespace sampan::runtime
