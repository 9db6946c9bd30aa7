// JSON helpers shared by the loaders (safetensors header, weight-store index, config parser), so
// that every loader words its errors the same way.
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace sampan {

// `s` made safe to embed in a one-line error message: control characters and invalid UTF-8
// bytes become \xNN escapes, and text past `max_chars` is cut with "...".
std::string printable(std::string_view s, size_t max_chars = 200);

// Parses `text` as JSON, rejecting duplicate keys in any object (the format would otherwise keep
// one silently) and nesting deeper than `max_depth`. Throws Error(kInvalidModel) as
// "<source>: <what> is not valid JSON: <reason>" on one line.
nlohmann::json parse_json_strict(std::string_view text, const std::string& source,
                                 std::string_view what, int max_depth);

// The kind of a JSON value with its article ("an object", "a string", "null"), for messages
// such as "key 'x' is a string, expected an integer".
const char* json_kind(const nlohmann::json& v);

}  // namespace sampan
