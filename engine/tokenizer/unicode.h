// Unicode helpers for the tokenizers: UTF-8 coding, the GPT-2 byte <-> character mapping and the
// character classes BERT's normalizer and pre-tokenizer need (tables from Unicode 14).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sampan::tok::unicode {

struct Range {
  char32_t first, last;
};
struct Mapping {
  char32_t cp;
  char32_t to[3];  // 0-terminated when shorter
};

// Decodes one code point at s[i] and advances i. Invalid or truncated sequences yield U+FFFD
// and advance one byte, so every byte is consumed exactly once.
char32_t next_code_point(std::string_view s, size_t& i);
// Length of the UTF-8 sequence a lead byte announces (1 for continuation/invalid bytes).
size_t utf8_len(uint8_t lead);
void append_utf8(std::string& out, char32_t cp);
// Bytes at the end of `s` that start a UTF-8 sequence not yet complete (0..3).
size_t incomplete_utf8_suffix(std::string_view s);

// GPT-2's reversible mapping of bytes to printable characters (space -> "Ġ", '\n' -> "Ċ").
char32_t byte_to_char(uint8_t b);
// -1 when `cp` is not the image of a byte.
int char_to_byte(char32_t cp);

bool is_other(char32_t cp);             // general category C* (control, format, unassigned...)
bool is_punctuation(char32_t cp);       // general category P*
bool is_mark_nonspacing(char32_t cp);   // general category Mn
bool is_whitespace(char32_t cp);        // White_Space property (as Rust's char::is_whitespace)
bool is_chinese_char(char32_t cp);      // CJK ideograph blocks, as BERT defines them
// Appends the full lowercase mapping of cp.
void append_lower(char32_t cp, std::u32string& out);
// Appends NFD(cp) without its nonspacing marks (BERT's strip_accents, one character at a time).
void append_strip_accents(char32_t cp, std::u32string& out);

}  // namespace sampan::tok::unicode
