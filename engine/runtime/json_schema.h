// A JSON Schema compiled to a byte grammar (grammar.h), for OpenAI's response_format json_schema
// and forced tool calls: decoding constrained by it produces JSON texts the schema admits.
//
// What a caller may rely on: every complete text of the grammar is one JSON value, without
// whitespace before or after it, that validates against the schema (draft 2020-12 semantics, as
// Python's jsonschema checks it). The grammar admits a subset of the valid texts, chosen so that
// generation stays deterministic where the schema allows choice: object members in the order of
// `properties` (optional ones may be left out; members the schema does not name are not
// generated), at most one space, or a newline and up to 20 spaces or tabs, between tokens,
// integers up to 16 digits, fractions up to 16 digits, exponents up to 2 digits (none where
// bounds apply), \u escapes only outside the surrogate range (strings with a pattern or format
// write each character one way: string_pattern.h).
//
// Supported keywords: type (one or a list), enum, const, anyOf, oneOf (where no value can match
// two branches: different types, or objects told apart by a required const member; otherwise
// refused), allOf with one entry, $ref to a local JSON pointer ("#", "#/$defs/X",
// "#/definitions/X", recursion included), $defs / definitions, properties, required,
// additionalProperties (false, true or a schema: with no `properties` it types the members of
// a map), propertyNames (on a map: its keys as that string schema admits them), items (false
// too), prefixItems, minItems, maxItems, minLength, maxLength, pattern
// (string_pattern.h: the intersection of ECMA-262 and Python regexes), format on strings (date,
// time, date-time, email, hostname, ipv4, ipv6, uuid enforced, as OpenAI's strict mode does;
// others ignored), minimum / maximum / exclusiveMinimum / exclusiveMaximum (number_range.h:
// decimal bounds, rounded inward on integers), multipleOf (an integer up to
// kMaxMultipleOf; the multiples are written as integers), uniqueItems (true: for items from a
// set of at most 64 values, enum / const / boolean / null, each value at most once in the order
// listed). Annotations are ignored (title, description, default, examples, ...). Any other keyword is refused rather than
// ignored (a grammar that silently dropped `uniqueItems` would produce invalid output):
// Error(kInvalidArgument) naming the field and the JSON pointer of the keyword. Inside anyOf /
// oneOf, a branch using what is not supported (a keyword, a regex feature such as lookaround, a
// remote $ref) is left out instead, as generating from the other branches still validates; a
// malformed branch is an error, and so is a union left with no branch.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/runtime/grammar.h"

namespace sampan::runtime {

// Limits on what a request may make the server build.
struct JsonSchemaLimits {
  static constexpr int kMaxDepth = 64;         // schema nesting, and JSON nesting of the text
  static constexpr int kMaxLength = 4096;      // minLength / maxLength / minItems / maxItems
  static constexpr size_t kMaxEnum = 4096;     // enum values
  static constexpr size_t kMaxSchemaBytes = 1 << 20;
  static constexpr int kMaxMultipleOf = 100;   // residue automaton states
};

// `schema_text`: the schema as JSON text (its member order is the order properties are
// generated in). `field`: the request field it came from, named by every error.
// Throws Error(kInvalidArgument, field, ...) for a text that is not JSON, a schema that uses an
// unsupported keyword, a bad keyword value, an unresolved $ref, or one that admits no value.
std::shared_ptr<const Grammar> compile_json_schema(std::string_view schema_text,
                                                   const std::string& field);

// A forced tool call (OpenAI tool_choice "required"): the text is a JSON list of calls
// [{"name": "<a tool's name>", "arguments": <a value of that tool's parameters schema>}, ...]
// with at least one call (exactly one unless `parallel`). Each tool's $refs resolve in its own
// schema; errors name the tool's `field`.
struct ToolSchema {
  std::string name;
  std::string parameters;  // schema text
  std::string field;       // "tools[2].function.parameters"
};
std::shared_ptr<const Grammar> compile_tool_calls(const std::vector<ToolSchema>& tools,
                                                  bool parallel, const std::string& field);

}  // namespace sampan::runtime
