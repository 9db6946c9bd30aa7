// Unicode normalization forms NFC, NFD, NFKC and NFKD (UAX #15): full decomposition, canonical
// ordering by combining class, canonical composition with the composition exclusions, and
// algorithmic Hangul. Tables come from scripts/gen_unicode_norm_tables.py (Unicode 14).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sampan::tok::unicode {

enum class NormForm { kNfc, kNfd, kNfkc, kNfkd };

// "NFC", "NFD", "NFKC", "NFKD" -> the form; false for any other name.
bool parse_norm_form(std::string_view name, NormForm& out);

// Canonical combining class (0 for starters and unassigned code points).
uint8_t combining_class(char32_t cp);

std::u32string normalize(NormForm form, std::u32string_view text);
// UTF-8 in and out. Invalid UTF-8 bytes become U+FFFD (as next_code_point decodes them); ASCII-only
// text is returned unchanged without decoding, since every form leaves ASCII alone.
std::string normalize(NormForm form, std::string_view text);

}  // namespace sampan::tok::unicode
