#include "engine/loaders/json_util.h"

#include <nlohmann/json.hpp>
#include <unordered_set>
#include <vector>

#include "engine/core/error.h"

namespace sampan {

using nlohmann::json;

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not one.
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
  }
  // Reject overlong forms, UTF-16 surrogates and code points past U+10FFFF.
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return n;
}

}  // namespace

std::string printable(std::string_view s, size_t max_chars) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    if (out.size() >= max_chars) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0 || c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

json parse_json_strict(std::string_view text, const std::string& source, std::string_view what,
                       int max_depth) {
  // One key set per open object, innermost last.
  std::vector<std::unordered_set<std::string>> open_objects;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        // The DOM is built without recursion, but a deep document still costs memory and
        // means the file is not what it claims to be.
        SAMPAN_CHECK(depth < max_depth, ErrorCode::kInvalidModel,
                     "{}: {} nests deeper than {} levels", source, what, max_depth);
        if (event == json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (!open_objects.empty() && !open_objects.back().insert(key).second) {
          fail(ErrorCode::kInvalidModel, "{}: {} has duplicate key '{}'", source, what,
               printable(key));
        }
        break;
      }
      case json::parse_event_t::array_end:
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    // nlohmann quotes the offending input, which may hold newlines or binary bytes.
    fail(ErrorCode::kInvalidModel, "{}: {} is not valid JSON: {}", source, what,
         printable(e.what(), 300));
  }
}

const char* json_kind(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    case json::value_t::binary: return "binary";
    case json::value_t::discarded: return "discarded";
  }
  return "?";
}

}  // namespace sampan
