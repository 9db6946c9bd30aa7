// A byte-level JSON recogniser (RFC 8259) for constrained decoding: the state after any prefix of
// a JSON text, advanced one byte at a time, small enough (a few words, no heap) to be copied per
// candidate token. step() refuses a byte exactly when no valid JSON text starts with the prefix
// plus that byte, within the limits below; done() says the prefix is a complete text.
//
// What it accepts: one JSON value whose root is an object (response_format json_object) or any
// value (root_object false); strings as valid UTF-8 (RFC 3629: no overlong forms, surrogates or
// code points past U+10FFFF) without raw control characters, with the JSON escapes (\uXXXX taken
// as four hex digits, as Python's json does, lone surrogates included); numbers in JSON's
// grammar; true / false / null; whitespace between tokens but none before or after the root
// value.
// Limits that keep a model from running away inside the grammar: nesting at most kMaxDepth,
// at most kMaxWhitespace whitespace bytes in a row, numbers at most kMaxNumberBytes long.
#pragma once

#include <cstdint>

namespace sampan::runtime {

struct JsonState {
  static constexpr int kMaxDepth = 32;
  static constexpr int kMaxWhitespace = 48;
  static constexpr int kMaxNumberBytes = 40;

  enum class Mode : uint8_t {
    kValue,           // a value is expected (the root, after ':' or after ',' in an array)
    kArrValueOrEnd,   // just after '[': a value or ']'
    kObjKeyOrEnd,     // just after '{': a key or '}'
    kObjKey,          // after ',' in an object: a key
    kColon,           // after a key
    kObjCommaOrEnd,   // after a member's value
    kArrCommaOrEnd,   // after an element
    kString,          // inside a string (a key when in_key)
    kStringEscape,    // after '\' in a string
    kStringHex,       // inside \uXXXX: hex_left digits to go
    kNumber,          // inside a number: sub-state num
    kLiteral,         // inside true / false / null: lit_word, lit_pos
    kDone,            // the root value is complete
  };

  Mode mode = Mode::kValue;
  bool root_object = true;  // the root must be an object
  bool in_key = false;
  uint8_t hex_left = 0;
  uint8_t num = 0;          // number sub-state (json_grammar.cc)
  uint8_t num_len = 0;
  uint8_t lit_word = 0;     // 0 true, 1 false, 2 null
  uint8_t lit_pos = 0;      // bytes of it already read
  uint8_t utf8_left = 0;    // continuation bytes still due in a string
  uint8_t utf8_lo = 0x80;   // the range the next continuation byte must be in
  uint8_t utf8_hi = 0xBF;
  uint8_t ws = 0;           // whitespace bytes in a row
  uint8_t depth = 0;        // open containers
  uint32_t objects = 0;     // bit d - 1: the container at depth d is an object (else an array)

  bool operator==(const JsonState&) const = default;
};

// Advances `s` by `byte`; false (and `s` unspecified) when no JSON text has the new prefix.
bool json_step(JsonState& s, uint8_t byte);

// The prefix is a complete JSON text (a root number, possible with root_object false, counts
// once it may end).
bool json_done(const JsonState& s);

// A hash of every field (the constraint's memo of allowed tokens per state).
uint64_t json_state_hash(const JsonState& s);

}  // namespace sampan::runtime
