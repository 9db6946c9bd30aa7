// UAX #15 normalization. Decomposition recurses over one-step mappings (a mapping's own
// characters may decompose further); canonical ordering is a stable sort of each run of
// non-starters by combining class; composition follows the standard "blocked" rule.
#include "engine/tokenizer/unicode_norm.h"

#include <algorithm>

#include "engine/tokenizer/unicode.h"
#include "engine/tokenizer/unicode_norm_tables.h"

namespace sampan::tok::unicode {
namespace {

namespace nt = norm_tables;

// Hangul syllables are L V (T)? sequences laid out arithmetically (Unicode ch. 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

const nt::Decomposition* find_decomposition(char32_t cp) {
  const auto* end = std::end(nt::kDecompositions);
  const auto* it = std::lower_bound(std::begin(nt::kDecompositions), end, cp,
                                    [](const nt::Decomposition& d, char32_t c) { return d.cp < c; });
  return it != end && it->cp == cp ? it : nullptr;
}

void decompose(char32_t cp, bool compat, std::u32string& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const nt::Decomposition* d = find_decomposition(cp);
  if (d == nullptr || (d->compat && !compat)) {
    out.push_back(cp);
    return;
  }
  for (size_t i = 0; i < d->len; ++i) decompose(nt::kDecompositionPool[d->offset + i], compat, out);
}

// Stable insertion sort of every maximal run of non-starters; runs are short in real text.
void canonical_order(std::u32string& s) {
  for (size_t i = 1; i < s.size(); ++i) {
    const uint8_t c = combining_class(s[i]);
    if (c == 0) continue;
    size_t j = i;
    while (j > 0 && combining_class(s[j - 1]) > c) {
      std::swap(s[j - 1], s[j]);
      --j;
    }
  }
}

// The primary composite of (a, b), or 0 when there is none.
char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto* end = std::end(nt::kCompositions);
  const auto* it = std::lower_bound(std::begin(nt::kCompositions), end, std::pair{a, b},
                                    [](const nt::Composition& c, std::pair<char32_t, char32_t> k) {
                                      return c.first != k.first ? c.first < k.first : c.second < k.second;
                                    });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

// In place on a canonically ordered decomposition. A character joins the last starter unless a
// character between them has a combining class >= its own (it is "blocked").
void compose(std::u32string& s) {
  if (s.empty()) return;
  size_t starter = 0;
  bool have_starter = combining_class(s[0]) == 0;  // leading non-starters join nothing
  int last_class = have_starter ? 0 : 256;
  size_t kept = 1;
  for (size_t i = 1; i < s.size(); ++i) {
    const char32_t ch = s[i];
    const int cls = combining_class(ch);
    if (have_starter && (last_class < cls || last_class == 0)) {
      if (const char32_t composite = compose_pair(s[starter], ch); composite != 0) {
        s[starter] = composite;
        continue;
      }
    }
    if (cls == 0) {
      starter = kept;
      have_starter = true;
    }
    last_class = cls;
    s[kept++] = ch;
  }
  s.resize(kept);
}

}  // namespace

bool parse_norm_form(std::string_view name, NormForm& out) {
  if (name == "NFC") out = NormForm::kNfc;
  else if (name == "NFD") out = NormForm::kNfd;
  else if (name == "NFKC") out = NormForm::kNfkc;
  else if (name == "NFKD") out = NormForm::kNfkd;
  else return false;
  return true;
}

uint8_t combining_class(char32_t cp) {
  if (cp < nt::kCccRanges[0].first) return 0;  // all of Latin-1 and ASCII
  const auto* end = std::end(nt::kCccRanges);
  const auto* it = std::upper_bound(std::begin(nt::kCccRanges), end, cp,
                                    [](char32_t c, const nt::CccRange& r) { return c < r.first; });
  --it;  // the last range starting at or before cp
  return cp <= it->last ? it->ccc : 0;
}

std::u32string normalize(NormForm form, std::u32string_view text) {
  const bool compat = form == NormForm::kNfkc || form == NormForm::kNfkd;
  std::u32string out;
  out.reserve(text.size());
  for (char32_t cp : text) decompose(cp, compat, out);
  canonical_order(out);
  if (form == NormForm::kNfc || form == NormForm::kNfkc) compose(out);
  return out;
}

std::string normalize(NormForm form, std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; })) {
    return std::string(text);
  }
  std::u32string cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) cps.push_back(next_code_point(text, i));
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : normalize(form, std::u32string_view(cps))) append_utf8(out, cp);
  return out;
}

}  // namespace sampan::tok::unicode
