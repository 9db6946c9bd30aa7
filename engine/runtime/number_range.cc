#include "engine/runtime/number_range.h"

#include <algorithm>
#include <cctype>
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

  // The magnitude written with optional sign already read: m >= L (> when L.strict) and
  // m <= U (< when U.strict; no U: unbounded), as integer digits and (numbers) a fraction.
  // Signs of L and U are ignored (the caller passes magnitudes).
  Alts magnitude(NumberBound l, std::optional<NumberBound> u, bool integer) {
    if (u && u->whole > kMaxNumberMagnitude) u = NumberBound{false, kMaxNumberMagnitude, "", false};
    if (l.whole > kMaxNumberMagnitude) return {};
    const int64_t top = u ? u->whole : kMaxNumberMagnitude;
    if (l.whole > top) return {};
    if (integer) {
      const int64_t a = l.whole + (l.strict || !l.frac.empty());
      const int64_t b = top - (u && u->strict && u->frac.empty());
      if (a > b) return {};
      const uint32_t r = digits_in(a, b);
      if (empty_.contains(r)) return {};
      return {{r}};
    }
    Alts alts;
    if (l.whole + 1 <= top - 1) alts.push_back({digits_in(l.whole + 1, top - 1), frac_any()});
    auto add = [&](int64_t whole, std::optional<uint32_t> frac) {
      if (frac) alts.push_back({literal(whole), *frac});
    };
    if (u && u->whole == l.whole) {
      add(l.whole, frac_range(l.frac, l.strict, u->frac, u->strict));
      return alts;
    }
    add(l.whole, frac_range(l.frac, l.strict, std::nullopt, false));
    if (u) add(u->whole, frac_range("", false, u->frac, u->strict));
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

  uint32_t frac_any() { return *frac_range("", false, std::nullopt, false); }

  // A fraction F (nothing, or '.' and 1 to 16 digits) with lo <= 0.F <= hi (< when strict; no
  // hi: below 1), lo and hi given as the digits after the point; nullopt when none exists.
  // Digit by digit, tracking whether the digits so far equal lo's and hi's (tight).
  std::optional<uint32_t> frac_range(const std::string& lo, bool lo_strict,
                                     const std::optional<std::string>& hi, bool hi_strict) {
    const auto key = std::make_tuple(lo, lo_strict, hi.value_or("~"), hi_strict);
    if (auto it = frac_memo_.find(key); it != frac_memo_.end()) return it->second;
    auto digit = [](const std::string& s, size_t i) { return i < s.size() ? s[i] : '0'; };
    auto zeros_from = [](const std::string& s, size_t i) {
      return i >= s.size() || s.find_first_not_of('0', i) == std::string::npos;
    };
    // Whether F may end after i digits, tight against lo (tl) / hi (th).
    auto end_ok = [&](size_t i, bool tl, bool th) {
      const bool lo_ok = !tl || (zeros_from(lo, i) && !lo_strict);
      const bool hi_ok = !th || !(zeros_from(*hi, i) && hi_strict);
      return lo_ok && hi_ok;
    };
    std::map<std::tuple<size_t, bool, bool>, std::optional<uint32_t>> memo;
    // The digits from position i on (at least one when `need`), or nullopt when none fit.
    std::function<std::optional<uint32_t>(size_t, bool, bool, bool)> rest =
        [&](size_t i, bool tl, bool th, bool need) -> std::optional<uint32_t> {
      if (!tl && !th) return need ? std::optional(rule({{g_.byte_range('0', '9'), upto(15 - i)}}))
                                  : std::optional(upto(16 - i));
      const auto k = std::make_tuple(i, tl, th);
      if (!need) {
        if (auto it = memo.find(k); it != memo.end()) return it->second;
      }
      Alts alts;
      if (!need && end_ok(i, tl, th)) alts.push_back({});
      if (i < 16) {
        const char d_lo = tl ? digit(lo, i) : '0', d_hi = th ? digit(*hi, i) : '9';
        // Digits a..b, then what follows with the tightness they leave.
        auto add = [&](char a, char b, bool tl2, bool th2) {
          if (a > b) return;
          if (const auto next = rest(i + 1, tl2, th2, false)) {
            alts.push_back({g_.byte_range(static_cast<uint8_t>(a), static_cast<uint8_t>(b)),
                            *next});
          }
        };
        if (d_lo <= d_hi) {
          add(d_lo, d_lo, tl, th && d_lo == d_hi);
          if (d_hi > d_lo) {
            add(static_cast<char>(d_lo + 1), static_cast<char>(d_hi - 1), false, false);
            add(d_hi, d_hi, false, th);
          }
        }
      }
      std::optional<uint32_t> r;
      if (!alts.empty()) r = rule(std::move(alts));
      if (!need) memo[k] = r;
      return r;
    };
    const bool tl0 = !(lo.empty() && !lo_strict), th0 = hi.has_value();
    Alts alts;
    if (end_ok(0, tl0, th0)) alts.push_back({});
    if (auto digits = rest(0, tl0, th0, true)) alts.push_back({g_.byte('.'), *digits});
    std::optional<uint32_t> r;
    if (!alts.empty()) r = rule(std::move(alts));
    frac_memo_.emplace(key, r);
    return r;
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
  std::map<std::tuple<std::string, bool, std::string, bool>, std::optional<uint32_t>> frac_memo_;
};

}  // namespace

std::optional<uint32_t> add_number_range(Grammar& g, std::optional<NumberBound> lo,
                                         std::optional<NumberBound> hi, bool integer,
                                         int64_t multiple,
                                         const std::function<uint32_t()>& new_rule) {
  if (multiple > 1) integer = true;  // multiples written as integers
  RangeBuilder b(g, new_rule, std::max<int64_t>(multiple, 1));
  auto zero = [](const NumberBound& x) { return x.whole == 0 && x.frac.empty(); };
  auto below_zero = [&](const NumberBound& x) { return x.negative && !zero(x); };
  auto above_zero = [&](const NumberBound& x) { return !x.negative && !zero(x); };
  const NumberBound none{false, 0, "", false};
  Alts alts;
  // No sign: v = m.
  if (!hi || above_zero(*hi) || (zero(*hi) && !hi->strict)) {
    const NumberBound l = lo && !below_zero(*lo) ? *lo : none;
    for (auto& a : b.magnitude(l, hi, integer)) alts.push_back(std::move(a));
  }
  // '-': v = -m.
  if (!lo || below_zero(*lo) || (zero(*lo) && !lo->strict)) {
    const NumberBound l = hi && !above_zero(*hi) ? *hi : none;
    const uint32_t minus_sign = b.rule({{g.byte('-')}});
    for (auto& a : b.magnitude(l, lo, integer)) {
      a.insert(a.begin(), minus_sign);
      alts.push_back(std::move(a));
    }
  }
  if (alts.empty()) return std::nullopt;
  return b.rule(std::move(alts));
}

std::optional<NumberBound> decimal_bound(std::string_view text, bool strict) {
  NumberBound b;
  b.strict = strict;
  size_t i = 0;
  if (i < text.size() && text[i] == '-') b.negative = true, ++i;
  std::string digits;  // mantissa digits, the point at `point`
  int64_t point = -1;
  for (; i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.');
       ++i) {
    if (text[i] == '.') {
      if (point >= 0) return std::nullopt;
      point = static_cast<int64_t>(digits.size());
    } else {
      digits += text[i];
    }
  }
  if (digits.empty()) return std::nullopt;
  if (point < 0) point = static_cast<int64_t>(digits.size());
  if (i < text.size()) {
    if (text[i] != 'e' && text[i] != 'E') return std::nullopt;
    ++i;
    bool neg_exp = false;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) neg_exp = text[i++] == '-';
    int64_t e = 0;
    if (i >= text.size()) return std::nullopt;
    for (; i < text.size(); ++i) {
      if (!std::isdigit(static_cast<unsigned char>(text[i]))) return std::nullopt;
      e = std::min<int64_t>(e * 10 + (text[i] - '0'), 100000);
    }
    point += neg_exp ? -e : e;
  }
  // Digits before the point make `whole` (saturating past the 16 digits written), the rest
  // `frac` (at most 400 digits: a double's shortest form needs fewer than 350).
  int64_t whole = 0;
  for (int64_t k = 0; k < point; ++k) {
    const int d = k < static_cast<int64_t>(digits.size()) ? digits[k] - '0' : 0;
    whole = whole > kMaxNumberMagnitude ? whole : whole * 10 + d;
  }
  b.whole = std::min(whole, kMaxNumberMagnitude + 1);
  std::string frac;
  for (int64_t k = std::min<int64_t>(point, 0); k < static_cast<int64_t>(digits.size()); ++k) {
    if (k < point) continue;
    frac += k < 0 ? '0' : digits[k];
    if (frac.size() > 400) return std::nullopt;
  }
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  b.frac = std::move(frac);
  if (b.whole == 0 && b.frac.empty()) b.negative = false;
  return b;
}

}  // namespace sampan::runtime
