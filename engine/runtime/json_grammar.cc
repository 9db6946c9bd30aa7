#include "engine/runtime/json_grammar.h"

namespace sampan::runtime {
namespace {

using Mode = JsonState::Mode;

// Number sub-states: which bytes may follow, and whether the number may end here.
enum Num : uint8_t {
  kAfterMinus,    // "-": a digit
  kZero,          // "0" / "-0": '.', 'e' or the end
  kInt,           // "12": digits, '.', 'e' or the end
  kAfterDot,      // "1.": a digit
  kFrac,          // "1.5": digits, 'e' or the end
  kAfterE,        // "1e": a sign or a digit
  kAfterESign,    // "1e-": a digit
  kExp,           // "1e5": digits or the end
};

constexpr const char* kWords[3] = {"true", "false", "null"};
constexpr uint8_t kWordLen[3] = {4, 5, 4};

bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }
bool is_hex(uint8_t b) {
  return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}
bool is_ws(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }

bool top_is_object(const JsonState& s) { return (s.objects >> (s.depth - 1)) & 1u; }

// A value just ended: what the enclosing container expects next.
void value_end(JsonState& s) {
  if (s.depth == 0) {
    s.mode = Mode::kDone;
  } else {
    s.mode = top_is_object(s) ? Mode::kObjCommaOrEnd : Mode::kArrCommaOrEnd;
  }
}

bool open(JsonState& s, bool object) {
  if (s.depth >= JsonState::kMaxDepth) return false;
  ++s.depth;
  if (object) {
    s.objects |= 1u << (s.depth - 1);
  } else {
    s.objects &= ~(1u << (s.depth - 1));
  }
  s.mode = object ? Mode::kObjKeyOrEnd : Mode::kArrValueOrEnd;
  return true;
}

bool close(JsonState& s, bool object) {
  if (s.depth == 0 || top_is_object(s) != object) return false;
  --s.depth;
  value_end(s);
  return true;
}

// The first byte of a value (mode kValue or kArrValueOrEnd).
bool start_value(JsonState& s, uint8_t b) {
  if (s.depth == 0 && s.root_object && b != '{') return false;
  switch (b) {
    case '{': return open(s, true);
    case '[': return open(s, false);
    case '"':
      s.mode = Mode::kString;
      s.in_key = false;
      return true;
    case '-':
      s.mode = Mode::kNumber;
      s.num = kAfterMinus;
      s.num_len = 1;
      return true;
    case 't': case 'f': case 'n':
      s.mode = Mode::kLiteral;
      s.lit_word = b == 't' ? 0 : b == 'f' ? 1 : 2;
      s.lit_pos = 1;
      return true;
    default:
      if (!is_digit(b)) return false;
      s.mode = Mode::kNumber;
      s.num = b == '0' ? kZero : kInt;
      s.num_len = 1;
      return true;
  }
}

// A byte inside a string (not after '\').
bool string_byte(JsonState& s, uint8_t b) {
  if (s.utf8_left > 0) {
    if (b < s.utf8_lo || b > s.utf8_hi) return false;
    --s.utf8_left;
    s.utf8_lo = 0x80;
    s.utf8_hi = 0xBF;
    return true;
  }
  if (b == '"') {
    if (s.in_key) {
      s.mode = Mode::kColon;
    } else {
      value_end(s);
    }
    return true;
  }
  if (b == '\\') {
    s.mode = Mode::kStringEscape;
    return true;
  }
  if (b < 0x20) return false;  // raw control characters must be escaped
  if (b < 0x80) return true;
  // RFC 3629's table of well-formed sequences: the lead byte fixes the count and the range of the
  // first continuation byte.
  if (b >= 0xC2 && b <= 0xDF) {
    s.utf8_left = 1;
  } else if (b == 0xE0) {
    s.utf8_left = 2;
    s.utf8_lo = 0xA0;
  } else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) {
    s.utf8_left = 2;
  } else if (b == 0xED) {
    s.utf8_left = 2;
    s.utf8_hi = 0x9F;
  } else if (b == 0xF0) {
    s.utf8_left = 3;
    s.utf8_lo = 0x90;
  } else if (b >= 0xF1 && b <= 0xF3) {
    s.utf8_left = 3;
  } else if (b == 0xF4) {
    s.utf8_left = 3;
    s.utf8_hi = 0x8F;
  } else {
    return false;  // a continuation byte without a lead, an overlong lead, or past U+10FFFF
  }
  return true;
}

// A byte inside a number; one that cannot continue it ends it (when it may end) and is then
// read in the enclosing container's mode.
bool number_byte(JsonState& s, uint8_t b) {
  const auto more = [&](uint8_t next) {
    if (s.num_len >= JsonState::kMaxNumberBytes) return false;
    ++s.num_len;
    s.num = next;
    return true;
  };
  switch (s.num) {
    case kAfterMinus:
      if (!is_digit(b)) return false;
      return more(b == '0' ? kZero : kInt);
    case kZero:
      if (b == '.') return more(kAfterDot);
      if (b == 'e' || b == 'E') return more(kAfterE);
      break;
    case kInt:
      if (is_digit(b)) return more(kInt);
      if (b == '.') return more(kAfterDot);
      if (b == 'e' || b == 'E') return more(kAfterE);
      break;
    case kAfterDot:
      return is_digit(b) && more(kFrac);
    case kFrac:
      if (is_digit(b)) return more(kFrac);
      if (b == 'e' || b == 'E') return more(kAfterE);
      break;
    case kAfterE:
      if (b == '+' || b == '-') return more(kAfterESign);
      return is_digit(b) && more(kExp);
    case kAfterESign:
      return is_digit(b) && more(kExp);
    case kExp:
      if (is_digit(b)) return more(kExp);
      break;
    default:
      return false;
  }
  // kZero, kInt, kFrac, kExp may end here: the byte belongs to what follows the number.
  value_end(s);
  return json_step(s, b);
}

}  // namespace

bool json_step(JsonState& s, uint8_t b) {
  switch (s.mode) {
    case Mode::kString: return string_byte(s, b);
    case Mode::kStringEscape:
      if (b == 'u') {
        s.mode = Mode::kStringHex;
        s.hex_left = 4;
        return true;
      }
      if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' ||
          b == 't') {
        s.mode = Mode::kString;
        return true;
      }
      return false;
    case Mode::kStringHex:
      if (!is_hex(b)) return false;
      if (--s.hex_left == 0) s.mode = Mode::kString;
      return true;
    case Mode::kNumber: return number_byte(s, b);
    case Mode::kLiteral: {
      const uint8_t w = s.lit_word;
      if (b != static_cast<uint8_t>(kWords[w][s.lit_pos])) return false;
      if (++s.lit_pos == kWordLen[w]) value_end(s);
      return true;
    }
    case Mode::kDone: return false;
    default: break;
  }
  // Between tokens; none before the root value (JSON allows it, but it adds nothing to a reply,
  // and a model left free to pad would).
  if (is_ws(b)) {
    if (s.ws >= JsonState::kMaxWhitespace || (s.depth == 0 && s.mode == Mode::kValue)) {
      return false;
    }
    ++s.ws;
    return true;
  }
  s.ws = 0;
  switch (s.mode) {
    case Mode::kValue: return start_value(s, b);
    case Mode::kArrValueOrEnd:
      if (b == ']') return close(s, false);
      return start_value(s, b);
    case Mode::kObjKeyOrEnd:
      if (b == '}') return close(s, true);
      [[fallthrough]];
    case Mode::kObjKey:
      if (b != '"') return false;
      s.mode = Mode::kString;
      s.in_key = true;
      return true;
    case Mode::kColon:
      if (b != ':') return false;
      s.mode = Mode::kValue;
      return true;
    case Mode::kObjCommaOrEnd:
      if (b == ',') {
        s.mode = Mode::kObjKey;
        return true;
      }
      return b == '}' && close(s, true);
    case Mode::kArrCommaOrEnd:
      if (b == ',') {
        s.mode = Mode::kValue;
        return true;
      }
      return b == ']' && close(s, false);
    default: return false;
  }
}

bool json_done(const JsonState& s) {
  if (s.mode == Mode::kDone) return true;
  return s.mode == Mode::kNumber && s.depth == 0 &&
         (s.num == kZero || s.num == kInt || s.num == kFrac || s.num == kExp);
}

uint64_t json_state_hash(const JsonState& s) {
  // FNV-1a over the fields (not the object's bytes: padding is unspecified).
  uint64_t h = 1469598103934665603ull;
  const auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(static_cast<uint64_t>(s.mode) | uint64_t{s.root_object} << 8 | uint64_t{s.in_key} << 9 |
      uint64_t{s.hex_left} << 16 | uint64_t{s.num} << 24 | uint64_t{s.num_len} << 32 |
      uint64_t{s.lit_word} << 40 | uint64_t{s.lit_pos} << 48 | uint64_t{s.utf8_left} << 56);
  mix(uint64_t{s.utf8_lo} | uint64_t{s.utf8_hi} << 8 | uint64_t{s.ws} << 16 |
      uint64_t{s.depth} << 24 | uint64_t{s.objects} << 32);
  return h;
}

}  // namespace sampan::runtime
