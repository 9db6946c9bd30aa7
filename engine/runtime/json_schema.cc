#include "engine/runtime/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <vector>

#include "engine/core/error.h"
#include "engine/loaders/json_util.h"
#include "engine/runtime/json_schema_compiler.h"
#include "engine/runtime/number_range.h"
#include "engine/runtime/string_pattern.h"

namespace sampan::runtime {
namespace {

using schema_detail::OJson;

OJson parse_schema(std::string_view schema_text, const std::string& field) {
  if (schema_text.size() > JsonSchemaLimits::kMaxSchemaBytes) {
    fail_field(ErrorCode::kInvalidArgument, field, "'{}' is longer than {} bytes", field,
               JsonSchemaLimits::kMaxSchemaBytes);
  }
  auto limit = [](int depth, OJson::parse_event_t event, OJson&) {
    if ((event == OJson::parse_event_t::object_start ||
         event == OJson::parse_event_t::array_start) &&
        depth >= JsonSchemaLimits::kMaxDepth * 2) {
      throw std::length_error("nesting");
    }
    return true;
  };
  try {
    return OJson::parse(schema_text.begin(), schema_text.end(), limit);
  } catch (const std::length_error&) {
    fail_field(ErrorCode::kInvalidArgument, field, "'{}' nests deeper than {} levels", field,
               JsonSchemaLimits::kMaxDepth * 2);
  } catch (const nlohmann::json::exception& e) {
    fail_field(ErrorCode::kInvalidArgument, field, "'{}' is not valid JSON: {}", field,
               printable(e.what(), 200));
  }
}

// Keywords that only describe: ignored, as a validator ignores them. "format" is an annotation
// in draft 2020-12 unless a validator opts in; on strings the formats format_pattern knows are
// enforced all the same (what a user asking for a date wants), the others ignored.
const std::set<std::string_view> kAnnotations = {
    "title",    "description", "default",  "examples",   "$schema",         "$id",
    "$comment", "deprecated",  "readOnly", "writeOnly",  "format",          "nullable",
    "$anchor",  "discriminator", "contentMediaType", "contentEncoding", "x-order",
};
const std::set<std::string_view> kSupported = {
    "type",       "enum",     "const",    "anyOf",     "allOf",     "$ref",
    "$defs",      "definitions", "properties", "required", "additionalProperties", "items",
    "minItems",   "maxItems", "minLength", "maxLength", "uniqueItems", "pattern",
    "minimum",    "maximum",  "exclusiveMinimum", "exclusiveMaximum", "prefixItems", "oneOf",
    "multipleOf", "propertyNames",
};

}  // namespace

namespace schema_detail {

uint32_t Compiler::compile_root(const OJson& root, std::string field) {
  root_ = &root;
  field_ = std::move(field);
  refs_.clear();
  return compile(root, "", 0);
}

std::shared_ptr<const Grammar> Compiler::finish(std::vector<Sym> top) {
  g_->add_alt(0, std::move(top));
  try {
    g_->finalize();
  } catch (const Error& e) {
    // No finite text (every instance nests forever), or a $ref cycle that reads nothing.
    bad("", fmt::format("admits no JSON value that can be generated ({})", e.what()));
  }
  if (GrammarMatcher(*g_).start().empty()) bad("", "admits no JSON value that can be generated");
  return g_holder_;
}

std::shared_ptr<const Grammar> Compiler::tool_calls(const std::vector<ToolSchema>& tools,
                                                    bool parallel, const std::string& field) {
  const uint32_t w = ws();
  const Sym comma = g_->byte(','), colon = g_->byte(':');
  std::vector<std::vector<Sym>> alts;
  std::vector<OJson> roots;
  roots.reserve(tools.size());  // compile_root keeps a pointer to each
  for (size_t i = 0; i < tools.size(); ++i) {
    roots.push_back(parse_schema(tools[i].parameters, tools[i].field));
    const uint32_t args = compile_root(roots.back(), tools[i].field);
    std::vector<Sym> call = cat(literal("{"), {w});
    call = cat(cat(call, literal("\"name\"")), {w, colon, w});
    call = cat(call, literal(OJson(tools[i].name).dump()));
    call = cat(cat(call, {w, comma, w}), literal("\"arguments\""));
    call = cat(call, {w, colon, w, args, w, g_->byte('}')});
    alts.push_back(std::move(call));
  }
  field_ = field;
  const uint32_t call = rule(std::move(alts));
  const uint32_t more = new_rule();
  g_->add_alt(more, {w, g_->byte(']')});
  if (parallel) g_->add_alt(more, {w, comma, w, call, more});
  return finish({g_->byte('['), w, call, more});
}

void Compiler::bad(const std::string& path, const std::string& what) {
  unsupported_ = false;
  fail_field(ErrorCode::kInvalidArgument, field_, "'{}'{}: {}", field_,
             path.empty() ? std::string() : fmt::format(" at {}", path), what);
}

void Compiler::unsupported(const std::string& path, const std::string& what) {
  try {
    bad(path, what);
  } catch (const Error&) {
    unsupported_ = true;
    throw;
  }
}

uint32_t Compiler::new_rule() {
  if (g_->rule_count() >= Grammar::kMaxRules) {
    bad("", fmt::format("needs more than {} grammar rules (string lengths, item counts and "
                        "nesting multiply them)", Grammar::kMaxRules));
  }
  return g_->add_rule();
}

uint32_t Compiler::rule(std::vector<std::vector<Sym>> alts) {
  const uint32_t r = new_rule();
  for (auto& a : alts) g_->add_alt(r, std::move(a));
  return r;
}

std::vector<Sym> Compiler::literal(std::string_view text) {
  std::vector<Sym> seq;
  for (const char c : text) seq.push_back(g_->byte(static_cast<uint8_t>(c)));
  return seq;
}

uint32_t Compiler::ws() {
  if (ws_) return *ws_;
  uint32_t indent = rule({{}});
  for (int i = 0; i < 20; ++i) indent = rule({{}, {g_->bytes(ws_indent_set()), indent}});
  ws_ = rule({{}, {g_->byte(' ')}, {g_->byte('\n'), indent}});
  return *ws_;
}

uint32_t Compiler::str_char() {
  if (char_) return *char_;
  Grammar::ByteSet ascii{};
  for (unsigned b = 0x20; b < 0x80; ++b) {
    if (b != '"' && b != '\\') ascii[b / 64] |= uint64_t{1} << (b % 64);
  }
  const Sym cont = g_->byte_range(0x80, 0xBF);
  const Sym hex = g_->bytes(set_of("0123456789abcdefABCDEF"));
  const uint32_t u4 = rule({{g_->bytes(set_of("0123456789abcABC")), hex, hex, hex},
                            {g_->bytes(set_of("dD")), g_->byte_range('0', '7'), hex, hex},
                            {g_->bytes(set_of("efEF")), hex, hex, hex}});
  const uint32_t esc = rule({{g_->bytes(set_of("\"\\/bfnrt"))}, {g_->byte('u'), u4}});
  Grammar::ByteSet e1{};
  for (unsigned b = 0xE1; b <= 0xEF; ++b) {
    if (b != 0xED) e1[b / 64] |= uint64_t{1} << (b % 64);
  }
  char_ = rule({{g_->bytes(ascii)},
                {g_->byte('\\'), esc},
                {g_->byte_range(0xC2, 0xDF), cont},
                {g_->byte(0xE0), g_->byte_range(0xA0, 0xBF), cont},
                {g_->bytes(e1), cont, cont},
                {g_->byte(0xED), g_->byte_range(0x80, 0x9F), cont},
                {g_->byte(0xF0), g_->byte_range(0x90, 0xBF), cont, cont},
                {g_->byte_range(0xF1, 0xF3), cont, cont, cont},
                {g_->byte(0xF4), g_->byte_range(0x80, 0x8F), cont, cont}});
  return *char_;
}

uint32_t Compiler::string(int64_t min_len, int64_t max_len) {
  if (min_len == 0 && max_len < 0 && any_string_) return *any_string_;
  const uint32_t ch = str_char();
  const Sym quote = g_->byte('"');
  // after[i]: i characters read. Built from the end: the unbounded tail loops on itself.
  uint32_t next;
  int64_t top;
  if (max_len < 0) {
    next = new_rule();
    g_->add_alt(next, {quote});
    g_->add_alt(next, {ch, next});
    top = min_len;
  } else {
    next = rule({{quote}});
    top = max_len;
  }
  for (int64_t i = top - 1; i >= 0; --i) {
    std::vector<std::vector<Sym>> alts;
    if (i >= min_len) alts.push_back({quote});
    alts.push_back({ch, next});
    next = rule(std::move(alts));
  }
  const uint32_t r = rule({{quote, next}});
  if (min_len == 0 && max_len < 0) any_string_ = r;
  return r;
}

uint32_t Compiler::digits(int n) {
  uint32_t r = rule({{}});
  const Sym d = g_->byte_range('0', '9');
  for (int i = 0; i < n; ++i) r = rule({{}, {d, r}});
  return r;
}

uint32_t Compiler::integer() {
  if (integer_) return *integer_;
  const uint32_t abs = rule({{g_->byte('0')}, {g_->byte_range('1', '9'), digits(15)}});
  integer_ = rule({{abs}, {g_->byte('-'), abs}});
  return *integer_;
}

uint32_t Compiler::number() {
  if (number_) return *number_;
  const Sym d = g_->byte_range('0', '9');
  const uint32_t frac = rule({{}, {g_->byte('.'), d, digits(15)}});
  const uint32_t sign = rule({{}, {g_->byte('+')}, {g_->byte('-')}});
  const uint32_t exp = rule({{}, {g_->bytes(set_of("eE")), sign, d, digits(1)}});
  number_ = rule({{integer(), frac, exp}});
  return *number_;
}

uint32_t Compiler::any_value() {
  if (any_) return *any_;
  any_ = new_rule();
  const uint32_t w = ws();
  const Sym comma = g_->byte(','), colon = g_->byte(':');
  const uint32_t member = rule({{string(0, -1), w, colon, w, *any_}});
  const uint32_t more_members = new_rule();  // after a member
  g_->add_alt(more_members, {w, g_->byte('}')});
  g_->add_alt(more_members, {w, comma, w, member, more_members});
  const uint32_t object =
      rule({{g_->byte('{'), w, g_->byte('}')}, {g_->byte('{'), w, member, more_members}});
  const uint32_t more_items = new_rule();
  g_->add_alt(more_items, {w, g_->byte(']')});
  g_->add_alt(more_items, {w, comma, w, *any_, more_items});
  const uint32_t array =
      rule({{g_->byte('['), w, g_->byte(']')}, {g_->byte('['), w, *any_, more_items}});
  for (uint32_t r : {object, array, string(0, -1), number()}) g_->add_alt(*any_, {r});
  for (const char* lit : {"true", "false", "null"}) g_->add_alt(*any_, literal(lit));
  return *any_;
}

int64_t Compiler::bound(const OJson& s, const char* key, const std::string& path, int64_t dflt) {
  auto it = s.find(key);
  if (it == s.end()) return dflt;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 ||
      it->get<int64_t>() > JsonSchemaLimits::kMaxLength) {
    bad(path + "/" + key,
        fmt::format("'{}' must be an integer in [0, {}]", key, JsonSchemaLimits::kMaxLength));
  }
  return it->get<int64_t>();
}

bool Compiler::type_matches(const OJson& v, std::string_view type) {
  if (type == "string") return v.is_string();
  if (type == "integer") {
    return v.is_number_integer() ||
           (v.is_number_float() && std::isfinite(v.get<double>()) &&
            std::floor(v.get<double>()) == v.get<double>());
  }
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  return false;
}

std::vector<std::string> Compiler::types(const OJson& s, const std::string& path) {
  std::vector<std::string> out;
  auto it = s.find("type");
  if (it == s.end()) return out;
  static const std::set<std::string_view> known = {"string", "integer", "number", "boolean",
                                                   "null",   "object",  "array"};
  auto add = [&](const OJson& t) {
    if (!t.is_string() || !known.contains(t.get_ref<const std::string&>())) {
      bad(path + "/type", fmt::format("unknown type {}", printable(t.dump(), 60)));
    }
    out.push_back(t.get<std::string>());
  };
  if (it->is_array()) {
    if (it->empty()) bad(path + "/type", "'type' is an empty list");
    for (const auto& t : *it) add(t);
  } else {
    add(*it);
  }
  return out;
}

uint32_t Compiler::compile(const OJson& s, const std::string& path, int depth) {
  if (depth > JsonSchemaLimits::kMaxDepth) {
    bad(path, fmt::format("nests deeper than {} levels", JsonSchemaLimits::kMaxDepth));
  }
  if (s.is_boolean()) {
    if (!s.get<bool>()) bad(path, "the schema false admits no value");
    return any_value();
  }
  if (!s.is_object()) bad(path, fmt::format("a schema must be an object or a boolean, got {}",
                                            json_kind_ordered(s)));
  for (const auto& [k, v] : s.items()) {
    if (!kSupported.contains(k) && !kAnnotations.contains(k)) {
      unsupported(path + "/" + k,
                  fmt::format("keyword '{}' is not supported", printable(k, 60)));
    }
  }
  // A combinator or a fixed value with other assertions beside it would need both applied:
  // refused rather than one of them dropped ("type" beside enum / const filters the values).
  for (const char* head : {"$ref", "allOf", "anyOf", "oneOf", "enum", "const"}) {
    if (!s.contains(head)) continue;
    for (const auto& [k, v] : s.items()) {
      const std::string_view h = head;
      const bool fixed_value = h == "enum" || h == "const";
      const bool plain = k == h || kAnnotations.contains(k) || k == "$defs" ||
                         k == "definitions" ||
                         (fixed_value && (k == "type" || k == "enum" || k == "const"));
      if (!plain) {
        unsupported(path + "/" + k, fmt::format("'{}' beside '{}' is not supported", k, head));
      }
    }
  }
  if (auto it = s.find("$ref"); it != s.end()) return ref(*it, path + "/$ref", depth);
  if (auto it = s.find("allOf"); it != s.end()) {
    if (!it->is_array() || it->size() != 1) {
      unsupported(path + "/allOf", "'allOf' is supported with one schema only");
    }
    return compile((*it)[0], path + "/allOf/0", depth + 1);
  }
  for (const std::string key : {"anyOf", "oneOf"}) {
    auto it = s.find(key);
    if (it == s.end()) continue;
    if (!it->is_array() || it->empty()) {
      bad(path + "/" + key, fmt::format("'{}' must be a non-empty list", key));
    }
    // oneOf is anyOf where no value can match two branches: checked, not assumed.
    if (key == "oneOf") check_disjoint(*it, path + "/oneOf");
    std::vector<std::vector<Sym>> alts;
    std::optional<Error> first;
    for (size_t i = 0; i < it->size(); ++i) {
      const auto refs = refs_;
      try {
        alts.push_back({compile((*it)[i], fmt::format("{}/{}/{}", path, key, i), depth + 1)});
      } catch (const Error& e) {
        if (!unsupported_) throw;
        refs_ = refs;  // $refs first met in the branch left, with their unfinished rules
        if (!first) first = e;
      }
    }
    if (alts.empty()) {
      unsupported_ = true;
      throw *first;
    }
    return rule(std::move(alts));
  }
  const std::vector<std::string> ts = types(s, path);
  if (s.contains("const") || s.contains("enum")) {
    std::vector<std::vector<Sym>> alts;
    for (const OJson* v : fixed_values(s, ts, path)) alts.push_back(literal(v->dump()));
    return rule(std::move(alts));
  }
  std::vector<std::string> kinds = ts;
  if (kinds.empty()) {
    // No type: what the other keywords constrain, or anything.
    if (s.contains("properties") || s.contains("required") ||
        s.contains("additionalProperties") || s.contains("propertyNames")) {
      kinds.push_back("object");
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") ||
               s.contains("maxItems")) {
      kinds.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern") ||
               !format_of(s).empty()) {
      kinds.push_back("string");
    } else if (s.contains("minimum") || s.contains("maximum") || s.contains("multipleOf") ||
               s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum")) {
      kinds.push_back("number");
    } else {
      return any_value();
    }
  }
  std::vector<std::vector<Sym>> alts;
  for (const std::string& t : kinds) alts.push_back({typed(s, t, path, depth)});
  return alts.size() == 1 ? alts[0][0] : rule(std::move(alts));
}

std::vector<const OJson*> Compiler::fixed_values(const OJson& s, const std::vector<std::string>& ts,
                                                 const std::string& path) {
  std::vector<const OJson*> values;
  if (auto it = s.find("const"); it != s.end()) values.push_back(&*it);
  if (auto it = s.find("enum"); it != s.end()) {
    if (!it->is_array() || it->empty()) bad(path + "/enum", "'enum' must be a non-empty list");
    if (it->size() > JsonSchemaLimits::kMaxEnum) {
      bad(path + "/enum", fmt::format("more than {} values", JsonSchemaLimits::kMaxEnum));
    }
    if (values.empty()) {
      for (const auto& v : *it) values.push_back(&v);
    } else if (std::find(it->begin(), it->end(), *values[0]) == it->end()) {
      bad(path, "'const' is not among the 'enum' values");
    }
  }
  // With a type as well, only the values of that type validate.
  std::erase_if(values, [&](const OJson* v) {
    return !ts.empty() && std::none_of(ts.begin(), ts.end(), [&](const std::string& t) {
      return type_matches(*v, t);
    });
  });
  if (values.empty()) bad(path, "no 'enum' / 'const' value has the schema's type");
  return values;
}

const char* Compiler::json_kind_ordered(const OJson& v) {
  return json_kind(nlohmann::json::parse(v.dump()));
}

uint32_t Compiler::typed(const OJson& s, const std::string& t, const std::string& path, int depth) {
  if (t == "string") {
    const int64_t lo = bound(s, "minLength", path, 0);
    const int64_t hi = bound(s, "maxLength", path, -1);
    if (hi >= 0 && hi < lo) bad(path, "'maxLength' is less than 'minLength'");
    return pattern_string(s, path, lo, hi);
  }
  if (t == "integer" || t == "number") return bounded_number(s, path, t == "integer");
  if (t == "boolean") return rule({literal("true"), literal("false")});
  if (t == "null") return rule({literal("null")});
  if (t == "array") return array(s, path, depth);
  return object(s, path, depth);
}

std::string_view Compiler::format_of(const OJson& s) {
  auto it = s.find("format");
  return it != s.end() && it->is_string() ? format_pattern(it->get_ref<const std::string&>())
                                          : std::string_view();
}

uint32_t Compiler::pattern_string(const OJson& s, const std::string& path, int64_t lo, int64_t hi) {
  const auto it = s.find("pattern");
  const std::string_view by_format = format_of(s);
  if (it == s.end() && by_format.empty()) return string(lo, hi);
  if (it != s.end() && !it->is_string()) bad(path + "/pattern", "'pattern' must be a string");
  if (it != s.end() && !by_format.empty()) {
    unsupported(path + "/format", "'format' beside 'pattern' is not supported");
  }
  const std::string where = path + (it != s.end() ? "/pattern" : "/format");
  try {
    return add_string_pattern(*g_, it != s.end() ? it->get_ref<const std::string&>() : by_format,
                              lo, hi, [this] { return new_rule(); });
  } catch (const PatternError& e) {
    if (e.unsupported) unsupported(where, e.what());
    bad(where, e.what());
  }
}

std::optional<NumberBound> Compiler::number_bound(const OJson& s, const char* key, bool upper,
                                                  bool integer, const std::string& path) {
  auto it = s.find(key);
  if (it == s.end()) return std::nullopt;
  const bool strict = std::string_view(key).starts_with("exclusive");
  if (!it->is_number()) bad(path + "/" + key, fmt::format("'{}' must be a number", key));
  constexpr double kFar = 1e17;  // past kMaxNumberMagnitude either way
  if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t{1} << 62) {
    return NumberBound::integer(upper ? kMaxNumberMagnitude + 1 : int64_t{1} << 62, false);
  }
  if (it->is_number_integer()) return NumberBound::integer(it->get<int64_t>(), strict);
  const double x = it->get<double>();
  if (!std::isfinite(x)) bad(path + "/" + key, fmt::format("'{}' must be finite", key));
  const double c = std::clamp(x, -kFar, kFar);
  if (std::floor(c) == c) return NumberBound::integer(static_cast<int64_t>(c), strict);
  if (integer) {
    // An integer above 2.5 is >= 3; below it <= 2; strictness is then moot.
    return NumberBound::integer(static_cast<int64_t>(upper ? std::floor(c) : std::ceil(c)),
                                false);
  }
  // The shortest decimal that reads back as this double (nlohmann's dump), so that a text
  // within it is within the double for a validator comparing doubles too.
  const auto b = decimal_bound(OJson(c).dump(), strict);
  if (!b) bad(path + "/" + key, fmt::format("'{}' could not be read as a decimal", key));
  return b;
}

int Compiler::compare(const NumberBound& a, const NumberBound& b) {
  auto key = [](const NumberBound& x) {
    const bool zero = x.whole == 0 && x.frac.empty();
    return std::make_tuple(zero ? 0 : x.negative ? -1 : 1, x.whole, x.frac);
  };
  const auto ka = key(a), kb = key(b);
  if (std::get<0>(ka) != std::get<0>(kb)) return std::get<0>(ka) < std::get<0>(kb) ? -1 : 1;
  // Same sign: magnitudes compare by whole, then by fraction digits (as strings: no trailing
  // zeros, so "5" < "52" < "6" reads 0.5 < 0.52 < 0.6); negative values in reverse.
  const int mag = std::tie(std::get<1>(ka), std::get<2>(ka)) < std::tie(std::get<1>(kb),
                                                                        std::get<2>(kb))
                      ? -1
                      : (ka == kb ? 0 : 1);
  return std::get<0>(ka) < 0 ? -mag : mag;
}

uint32_t Compiler::bounded_number(const OJson& s, const std::string& path, bool integer) {
  int64_t multiple = 1;
  if (auto it = s.find("multipleOf"); it != s.end()) {
    const double m = it->is_number() ? it->get<double>() : 0;
    if (!it->is_number() || !(m > 0)) {
      bad(path + "/multipleOf", "'multipleOf' must be a number above 0");
    }
    if (std::floor(m) != m || m > JsonSchemaLimits::kMaxMultipleOf) {
      unsupported(path + "/multipleOf",
          fmt::format("'multipleOf' is supported as an integer up to {} (a fractional one is "
                      "checked with floating-point division by validators, which disagree)",
                      JsonSchemaLimits::kMaxMultipleOf));
    }
    multiple = static_cast<int64_t>(m);
  }
  // A multiple of an integer is written as an integer, whatever the type.
  if (s.contains("multipleOf")) integer = true;
  // Of a bound and an exclusive one on the same side, the tighter (either may be absent).
  auto tighter = [](std::optional<NumberBound> a, std::optional<NumberBound> b,
                    bool upper) -> std::optional<NumberBound> {
    if (!a || !b) return a ? a : b;
    const int c = compare(*a, *b);
    if (c != 0) return (c < 0) == upper ? a : b;
    return a->strict ? a : b;
  };
  const auto lo = tighter(number_bound(s, "minimum", false, integer, path),
                          number_bound(s, "exclusiveMinimum", false, integer, path), false);
  const auto hi = tighter(number_bound(s, "maximum", true, integer, path),
                          number_bound(s, "exclusiveMaximum", true, integer, path), true);
  if (!lo && !hi && multiple == 1) return integer ? this->integer() : number();
  const auto r =
      add_number_range(*g_, lo, hi, integer, multiple, [this] { return new_rule(); });
  if (!r) bad(path, fmt::format("no {} lies within the bounds", integer ? "integer" : "number"));
  return *r;
}

uint32_t Compiler::ref(const OJson& r, const std::string& path, int depth) {
  if (!r.is_string() || r.get_ref<const std::string&>().empty() ||
      r.get_ref<const std::string&>()[0] != '#') {
    unsupported(path, "'$ref' must be a local reference (\"#\" or \"#/...\")");
  }
  const std::string target = r.get<std::string>().substr(1);
  if (auto it = refs_.find(target); it != refs_.end()) return it->second;
  const OJson* t = nullptr;
  try {
    t = &root_->at(OJson::json_pointer(target));
  } catch (const nlohmann::json::exception&) {
    bad(path, fmt::format("'$ref' {} does not resolve", printable(r.get<std::string>(), 80)));
  }
  const uint32_t id = new_rule();
  refs_[target] = id;  // before compiling, so that a recursive schema refers back to it
  g_->add_alt(id, {compile(*t, path, depth + 1)});
  return id;
}

}  // namespace schema_detail

std::shared_ptr<const Grammar> compile_json_schema(std::string_view schema_text,
                                                   const std::string& field) {
  const OJson schema = parse_schema(schema_text, field);
  schema_detail::Compiler c;
  const uint32_t value = c.compile_root(schema, field);
  return c.finish({value});
}

std::shared_ptr<const Grammar> compile_tool_calls(const std::vector<ToolSchema>& tools,
                                                  bool parallel, const std::string& field) {
  if (tools.empty()) fail_field(ErrorCode::kInvalidArgument, field, "'{}': no tools", field);
  return schema_detail::Compiler().tool_calls(tools, parallel, field);
}

}  // namespace sampan::runtime
