// The JSON Schema compiler behind json_schema.h, private to the files that implement it
// (json_schema.cc: values, strings, numbers, combinators, $ref; json_schema_containers.cc: arrays
// and objects). Include json_schema.h elsewhere.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/runtime/json_schema.h"
#include "engine/runtime/number_range.h"

namespace sampan::runtime::schema_detail {

using OJson = nlohmann::ordered_json;
using Sym = Grammar::Symbol;

// Compiles schemas into one Grammar: each method adds the rules of what it is named after and
// returns the rule id; errors are Error(kInvalidArgument) naming the field and the JSON pointer.
class Compiler {
 public:
  Compiler() : g_holder_(std::make_shared<Grammar>()), g_(g_holder_.get()) {
    g_->set_root(new_rule());  // the root rule comes first
  }

  // The rule of the values `root` (a schema from `field`) admits; its $refs resolve in it.
  uint32_t compile_root(const OJson& root, std::string field);

  // Finishes with `top` as what a text must be.
  std::shared_ptr<const Grammar> finish(std::vector<Sym> top);

  // [{"name": <one of the tools>, "arguments": <its parameters>}, ...]: one call, or several.
  std::shared_ptr<const Grammar> tool_calls(const std::vector<ToolSchema>& tools, bool parallel,
                                            const std::string& field);

 private:
  [[noreturn]] void bad(const std::string& path, const std::string& what);

  // A valid schema using what this compiler does not follow: an anyOf / oneOf leaves such a
  // branch out (generating from the others still validates) rather than failing.
  [[noreturn]] void unsupported(const std::string& path, const std::string& what);
  uint32_t new_rule();
  uint32_t rule(std::vector<std::vector<Sym>> alts);

  // The bytes of `text`, one symbol each.
  std::vector<Sym> literal(std::string_view text);
  static std::vector<Sym> cat(std::vector<Sym> a, const std::vector<Sym>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  // Whitespace between tokens: nothing, one space, or a newline and up to 20 spaces / tabs.
  uint32_t ws();
  static Grammar::ByteSet ws_indent_set() {
    Grammar::ByteSet s{};
    s[0] |= (uint64_t{1} << ' ') | (uint64_t{1} << '\t');
    return s;
  }

  // One character of a JSON string: printable ASCII but '"' and '\', an escape (\u outside the
  // surrogates, so that every escape is one code point for a length count), or one UTF-8
  // encoded code point (RFC 3629).
  uint32_t str_char();
  static Grammar::ByteSet set_of(std::string_view chars) {
    Grammar::ByteSet s{};
    for (const char c : chars) {
      const auto b = static_cast<uint8_t>(c);
      s[b / 64] |= uint64_t{1} << (b % 64);
    }
    return s;
  }

  // A string of min_len .. max_len characters (max_len < 0: unbounded).
  uint32_t string(int64_t min_len, int64_t max_len);

  // Up to `n` more digits.
  uint32_t digits(int n);
  uint32_t integer();
  uint32_t number();

  // Any JSON value (the schema true or {}).
  uint32_t any_value();
  int64_t bound(const OJson& s, const char* key, const std::string& path, int64_t dflt);
  static bool type_matches(const OJson& v, std::string_view type);
  std::vector<std::string> types(const OJson& s, const std::string& path);
  uint32_t compile(const OJson& s, const std::string& path, int depth);

  // The values a schema with const / enum admits: those of its type (`ts`, if any), at least one.
  std::vector<const OJson*> fixed_values(const OJson& s, const std::vector<std::string>& ts,
                                         const std::string& path);
  static const char* json_kind_ordered(const OJson& v);
  uint32_t typed(const OJson& s, const std::string& t, const std::string& path, int depth);

  // The pattern of a format this compiler enforces on strings (string_pattern.h), or empty.
  static std::string_view format_of(const OJson& s);
  uint32_t pattern_string(const OJson& s, const std::string& path, int64_t lo, int64_t hi);

  // One bound of `s` for a value of the type (integer: rounded inward to an integer).
  std::optional<NumberBound> number_bound(const OJson& s, const char* key, bool upper,
                                          bool integer, const std::string& path);

  // The order of two bounds' values (strictness aside).
  static int compare(const NumberBound& a, const NumberBound& b);
  uint32_t bounded_number(const OJson& s, const std::string& path, bool integer);

  // oneOf needs every value to match exactly one branch (schema_union.h).
  void check_disjoint(const OJson& branches, const std::string& path);
  uint32_t array(const OJson& s, const std::string& path, int depth);

  // uniqueItems true, for items from a finite set (enum, const, boolean, null): the values in
  // the order listed, each at most once (a strictly increasing choice of indexes, so no two
  // items are equal). Other item schemas are refused: a grammar cannot compare items.
  uint32_t unique_array(const OJson& s, const std::string& path, int depth, int64_t lo,
                        int64_t hi);

  // The keys a map's propertyNames admits: that schema read as one of strings (names are).
  uint32_t key_names(const OJson& names, const std::string& path, int depth);
  uint32_t object(const OJson& s, const std::string& path, int depth);
  uint32_t ref(const OJson& r, const std::string& path, int depth);

  std::shared_ptr<Grammar> g_holder_;
  Grammar* g_;
  const OJson* root_ = nullptr;
  std::string field_;
  std::map<std::string, uint32_t> refs_;
  std::optional<uint32_t> ws_, char_, any_string_, integer_, number_, any_;
  bool unsupported_ = false;  // the last error thrown was unsupported(), not bad()
};

}  // namespace sampan::runtime::schema_detail
