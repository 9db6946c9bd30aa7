#include "engine/runtime/number_range.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace sampan::runtime {
namespace {

using Sym = Grammar::Symbol;
using Alts = std::vector<std::vector<Sym>>;

class RangeBuilder {
 public:
  RangeBuilder(Grammar& g, const std::function<uint32_t()>& new_rule, int64_t multiple)
      : g_(g), new_rule_(new_rule), m_(multiple) {}

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
      const uint32_t r = digits_in(a, b);
      if (empty_.contains(r)) return {};
      return {{r}};
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

  // Canonical decimal integers in [lo, hi] (0 <= lo <= hi <= kMaxNumberMagnitude) that are
  // multiples of m_.
  uint32_t digits_in(int64_t lo, int64_t hi) {
    Alts alts;
    int64_t first = 0, last = 9;  // the d-digit numbers
    for (int d = 1; d <= 16; ++d) {
      const int64_t a = std::max(lo, first), b = std::min(hi, last);
      if (a <= b) {
        const uint32_t r = same_length(std::to_string(a), std::to_string(b), 0);
        if (!empty_.contains(r)) alts.push_back({r});
      }
      first = last + 1;
      last = last * 10 + 9;
    }
    return made(std::move(alts));
  }

  // A rule of `alts`, remembered as empty when there are none (so callers can drop it).
  uint32_t made(Alts alts) {
    const bool none = alts.empty();
    const uint32_t r = rule(std::move(alts));
    if (none) empty_.insert(r);
    return r;
  }

  // Digit strings of a's length from a to b (a <= b) that, read after a prefix whose value is
  // `residue` modulo m_, end on a multiple of m_ (a residue automaton beside the digit range).
  uint32_t same_length(const std::string& a, const std::string& b, int64_t residue) {
    const auto key = std::make_tuple(a, b, residue);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    const auto a0 = static_cast<uint8_t>(a[0]), b0 = static_cast<uint8_t>(b[0]);
    auto next = [&](unsigned digit) { return (residue * 10 + (digit - '0')) % m_; };
    Alts alts;
    // Consecutive digits leading to one tail rule share an alternative (all of them without
    // a multipleOf).
    unsigned run_lo = 0, run_hi = 0;
    uint32_t run_tail = 0;
    bool in_run = false;
    auto flush = [&] {
      if (in_run) alts.push_back({g_.byte_range(run_lo, run_hi), run_tail});
      in_run = false;
    };
    // Digits lo..hi, each followed by a string from ra to rb (none when ra is empty).
    auto add = [&](unsigned lo, unsigned hi, const std::string& ra, const std::string& rb) {
      if (ra.empty()) {
        Grammar::ByteSet set{};
        bool any = false;
        for (unsigned d = lo; d <= hi; ++d) {
          if (next(d) != 0) continue;
          set[d / 64] |= uint64_t{1} << (d % 64);
          any = true;
        }
        if (any) alts.push_back({g_.bytes(set)});
        return;
      }
      for (unsigned d = lo; d <= hi; ++d) {
        const uint32_t tail = same_length(ra, rb, next(d));
        if (empty_.contains(tail)) {
          flush();
          continue;
        }
        if (in_run && run_tail == tail && run_hi + 1 == d) {
          run_hi = d;
          continue;
        }
        flush();
        in_run = true;
        run_lo = run_hi = d;
        run_tail = tail;
      }
      flush();
    };
    const std::string rest_a = a.substr(1), rest_b = b.substr(1);
    if (a.size() == 1) {
      add(a0, b0, "", "");
    } else if (a0 == b0) {
      add(a0, a0, rest_a, rest_b);
    } else {
      const std::string nines(a.size() - 1, '9'), zeros(a.size() - 1, '0');
      add(a0, a0, rest_a, nines);
      if (a0 + 1u <= b0 - 1u) add(a0 + 1u, b0 - 1u, zeros, nines);
      add(b0, b0, zeros, rest_b);
    }
    const uint32_t r = made(std::move(alts));
    memo_.emplace(key, r);
    return r;
  }

  Grammar& g_;
  const std::function<uint32_t()>& new_rule_;
  int64_t m_;
  std::map<std::tuple<std::string, std::string, int64_t>, uint32_t> memo_;
  std::set<uint32_t> empty_;
  std::optional<uint32_t> frac_any_, frac_zero_, frac_nonzero_;
};

}  // namespace

std::optional<uint32_t> add_number_range(Grammar& g, std::optional<NumberBound> lo,
                                         std::optional<NumberBound> hi, bool integer,
                                         int64_t multiple,
                                         const std::function<uint32_t()>& new_rule) {
  if (multiple > 1) integer = true;  // multiples written as integers
  RangeBuilder b(g, new_rule, std::max<int64_t>(multiple, 1));
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
