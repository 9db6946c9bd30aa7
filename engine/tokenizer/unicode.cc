// The tables in unicode_tables.h were generated with Python's unicodedata (14.0) by:
//   for every code point c: kOther/kPunct/kMarkNonspacing = ranges of category C*/P*/Mn;
//   kLower[c] = c.lower() where it differs; kStripAccents[c] = NFD(c) without Mn characters
//   where it differs (Hangul syllables excluded: decomposed arithmetically below).
#include "engine/tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace sampan::tok::unicode_data {
using Range = sampan::tok::unicode::Range;
using Mapping = sampan::tok::unicode::Mapping;
}  // namespace sampan::tok::unicode_data

#include "engine/tokenizer/unicode_tables.h"

namespace sampan::tok::unicode {
namespace {

template <size_t N>
bool in_ranges(const Range (&table)[N], char32_t cp) {
  const Range* it = std::upper_bound(std::begin(table), std::end(table), cp,
                                     [](char32_t c, const Range& r) { return c < r.first; });
  return it != std::begin(table) && cp <= (it - 1)->last;
}

template <size_t N>
const Mapping* find_mapping(const Mapping (&table)[N], char32_t cp) {
  const Mapping* it = std::lower_bound(std::begin(table), std::end(table), cp,
                                       [](const Mapping& m, char32_t c) { return m.cp < c; });
  return it != std::end(table) && it->cp == cp ? it : nullptr;
}

void append_mapping(const Mapping& m, std::u32string& out) {
  for (char32_t c : m.to) {
    if (c == 0) break;
    out.push_back(c);
  }
}

struct ByteTables {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 512> to_byte{};
  ByteTables() {
    to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      // Printable Latin-1 bytes map to themselves; the rest are moved past U+00FF in order.
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteTables& byte_tables() {
  static const ByteTables t;
  return t;
}

}  // namespace

size_t utf8_len(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  const size_t n = utf8_len(b0);
  if (n == 1) {
    ++i;
    return b0 < 0x80 ? b0 : 0xFFFD;
  }
  if (i + n > s.size()) {
    ++i;
    return 0xFFFD;
  }
  char32_t cp = b0 & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  i += n;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t incomplete_utf8_suffix(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const auto b = static_cast<uint8_t>(s[s.size() - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation: keep looking for the lead
    const size_t need = utf8_len(b);
    return need > back ? back : 0;
  }
  return 0;
}

char32_t byte_to_char(uint8_t b) { return byte_tables().to_char[b]; }

int char_to_byte(char32_t cp) { return cp < 512 ? byte_tables().to_byte[cp] : -1; }

bool is_other(char32_t cp) { return in_ranges(unicode_data::kOther, cp); }
bool is_punctuation(char32_t cp) { return in_ranges(unicode_data::kPunct, cp); }
bool is_mark_nonspacing(char32_t cp) { return in_ranges(unicode_data::kMarkNonspacing, cp); }

bool is_whitespace(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_chinese_char(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

void append_lower(char32_t cp, std::u32string& out) {
  if (cp < 0x80) {
    out.push_back(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    return;
  }
  if (const Mapping* m = find_mapping(unicode_data::kLower, cp)) {
    append_mapping(*m, out);
  } else {
    out.push_back(cp);
  }
}

void append_strip_accents(char32_t cp, std::u32string& out) {
  if (cp < 0x80) {
    out.push_back(cp);
    return;
  }
  if (cp >= 0xAC00 && cp <= 0xD7A3) {  // Hangul syllable: L V [T] jamo, none of them marks
    const char32_t s = cp - 0xAC00;
    out.push_back(0x1100 + s / 588);
    out.push_back(0x1161 + (s % 588) / 28);
    if (s % 28 != 0) out.push_back(0x11A7 + s % 28);
    return;
  }
  if (is_mark_nonspacing(cp)) return;
  if (const Mapping* m = find_mapping(unicode_data::kStripAccents, cp)) {
    append_mapping(*m, out);
  } else {
    out.push_back(cp);
  }
}

}  // namespace sampan::tok::unicode
