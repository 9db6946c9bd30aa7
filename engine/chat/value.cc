#include "engine/chat/value.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "engine/chat/limits.h"

namespace sampan::chat {
namespace {

// Lists and dicts are freed through a per-thread queue, one at a time, so that releasing a value
// nested a million levels deep (built by a loop: {% set ns.x = [ns.x] %}) takes constant stack
// instead of one destructor frame per level.
struct Graveyard {
  std::vector<const List*> lists;
  std::vector<Dict*> dicts;
  bool draining = false;
};
thread_local Graveyard t_grave;

void drain_graveyard() {
  Graveyard& g = t_grave;
  if (g.draining) return;
  g.draining = true;
  while (!g.lists.empty() || !g.dicts.empty()) {
    if (!g.lists.empty()) {
      const List* l = g.lists.back();
      g.lists.pop_back();
      delete l;  // its items' lists and dicts land in the queue
    } else {
      Dict* d = g.dicts.back();
      g.dicts.pop_back();
      delete d;
    }
  }
  g.draining = false;
}

struct DeferredDelete {
  void operator()(const List* l) const {
    t_grave.lists.push_back(l);
    drain_graveyard();
  }
  void operator()(Dict* d) const {
    t_grave.dicts.push_back(d);
    drain_graveyard();
  }
};

thread_local RenderBudget* t_budget = nullptr;

}  // namespace

RenderBudget::RenderBudget() : prev(t_budget) { t_budget = this; }
RenderBudget::~RenderBudget() { t_budget = prev; }

void charge_steps(uint64_t steps) {
  RenderBudget* b = t_budget;
  if (!b) return;
  b->steps += steps;
  if (b->steps > limits::kMaxSteps) {
    render_fail(fmt::format("template rendering exceeded its budget of {} steps", limits::kMaxSteps));
  }
}

void charge_bytes(uint64_t bytes) { charge_steps(bytes / limits::kBytesPerStep); }

void check_string_size(uint64_t bytes) {
  if (bytes > limits::kMaxStringBytes) {
    render_fail(fmt::format("string of {} bytes exceeds the limit of {} bytes", bytes, limits::kMaxStringBytes));
  }
  charge_bytes(bytes);
}

void check_list_size(uint64_t items) {
  if (items > limits::kMaxListItems) {
    render_fail(fmt::format("list of {} items exceeds the limit of {} items", items, limits::kMaxListItems));
  }
  charge_steps(items);
}

Value Value::make_list(List items, bool tuple) {
  Value v;
  v.kind = Kind::kList;
  v.is_tuple = tuple;
  v.list = std::shared_ptr<const List>(new List(std::move(items)), DeferredDelete{});
  return v;
}

Value Value::make_dict(Dict items) {
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::shared_ptr<Dict>(new Dict(std::move(items)), DeferredDelete{});
  return v;
}

Value Value::make_namespace(Dict items) {
  Value v = make_dict(std::move(items));
  v.kind = Kind::kNamespace;
  return v;
}

Value Value::function(Function f) {
  Value v;
  v.kind = Kind::kCallable;
  v.fn = std::make_shared<const Function>(std::move(f));
  return v;
}

const Value* Value::find(const std::string& key) const {
  if (kind != Kind::kDict && kind != Kind::kNamespace) return nullptr;
  for (const auto& [k, val] : *dict) {
    if (k == key) return &val;
  }
  return nullptr;
}

const Value* CallArgs::get(size_t index, const char* name) {
  for (auto& [k, v] : kw) {
    if (k == name) return &v;
  }
  return index < pos.size() ? &pos[index] : nullptr;
}

void render_fail(std::string message) { throw RenderError{false, std::move(message)}; }
void render_unsupported(std::string what) { throw RenderError{true, std::move(what)}; }

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return v.b;
    case Kind::kInt: return v.i != 0;
    case Kind::kFloat: return v.f != 0;
    case Kind::kString: return !v.s.empty();
    case Kind::kList: return !v.list->empty();
    case Kind::kDict: return !v.dict->empty();
    case Kind::kNamespace:
    case Kind::kCallable: return true;
  }
  return false;
}

std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then laid out as Python's repr does: positional for exponents in
  // [-4, 16), otherwise scientific with a signed two-digit exponent.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  std::string sign;
  if (mant[0] == '-') {
    sign = "-";
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(static_cast<size_t>(exp + 1) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp + 1)) + "." + digits.substr(static_cast<size_t>(exp + 1));
    }
    return sign + out;
  }
  std::string m = digits.substr(0, 1);
  if (digits.size() > 1) m += "." + digits.substr(1);
  return fmt::format("{}{}e{}{:02d}", sign, m, exp < 0 ? '-' : '+', std::abs(exp));
}

namespace {

uint32_t decode(const std::string& s, size_t& pos) {
  const auto c = static_cast<unsigned char>(s[pos]);
  int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  if (pos + n > s.size()) n = 1;
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[pos + k]) & 0x3F);
  pos += n;
  return cp;
}

bool printable(uint32_t cp) {
  // Python's str.isprintable, approximated: control characters and the Unicode separators other
  // than the plain space are escaped by repr().
  if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0) || cp == 0xAD) return false;
  if (cp == 0x2028 || cp == 0x2029 || (cp >= 0x2000 && cp <= 0x200F) || cp == 0x00A0 || cp == 0x1680 ||
      cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF)
    return false;
  return true;
}

std::string str_repr(const std::string& s) {
  const char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, quote);
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t start = pos;
    const uint32_t cp = decode(s, pos);
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!printable(cp)) {
      out += cp < 0x100 ? fmt::format("\\x{:02x}", cp) : cp < 0x10000 ? fmt::format("\\u{:04x}", cp)
                                                                        : fmt::format("\\U{:08x}", cp);
    } else {
      out.append(s, start, pos - start);
    }
  }
  out += quote;
  return out;
}

std::string json_string(const std::string& s, bool ensure_ascii) {
  std::string out = "\"";
  for (size_t pos = 0; pos < s.size(); ++pos) {
    const char ch = s[pos];
    const auto c = static_cast<unsigned char>(ch);
    if (ensure_ascii && c >= 0x7F) {  // DEL too: Python escapes all but space..~
      // Python escapes the code point, as a UTF-16 surrogate pair above the BMP.
      uint32_t cp = decode(s, pos);
      --pos;  // the loop's ++pos moves past the character
      if (cp >= 0x10000) {
        cp -= 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", cp);
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

[[noreturn]] void too_deep() {
  render_fail(fmt::format("value nested deeper than {} levels", limits::kMaxValueDepth));
}

// Appends `piece` to `out` unless the result would pass the string size limit.
void append_checked(std::string& out, const std::string& piece) {
  const uint64_t total = static_cast<uint64_t>(out.size()) + piece.size();
  if (total > limits::kMaxStringBytes) check_string_size(total);  // fails
  charge_bytes(piece.size());  // only the bytes copied now: building piece by piece stays linear
  out += piece;
}

std::string repeat(const std::string& unit, int times) {
  check_string_size(static_cast<uint64_t>(unit.size()) * static_cast<uint64_t>(times) + 1);
  std::string out;
  for (int k = 0; k < times; ++k) out += unit;
  return out;
}

void json_into(const Value& v, const JsonOptions& opt, int depth, std::string& out) {
  std::string nl, nl_end;
  if (opt.pretty && (v.kind == Kind::kList || v.kind == Kind::kDict)) {
    nl = "\n" + repeat(opt.indent_unit, depth + 1);
    nl_end = "\n" + repeat(opt.indent_unit, depth);
  }
  switch (v.kind) {
    case Kind::kNone: out += "null"; return;
    case Kind::kBool: out += v.b ? "true" : "false"; return;
    case Kind::kInt: out += std::to_string(v.i); return;
    case Kind::kFloat:
      out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity") : float_repr(v.f);
      return;
    case Kind::kString: append_checked(out, json_string(v.s, opt.ensure_ascii)); return;
    case Kind::kList:
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      if (depth >= limits::kMaxValueDepth) too_deep();
      out += "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) append_checked(out, opt.item_sep);
        append_checked(out, nl);
        json_into((*v.list)[k], opt, depth + 1, out);
      }
      append_checked(out, nl_end + "]");
      return;
    case Kind::kDict: {
      if (v.dict->empty()) {
        out += "{}";
        return;
      }
      if (depth >= limits::kMaxValueDepth) too_deep();
      out += "{";
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : *v.dict) items.push_back(&kv);
      if (opt.sort_keys) {  // Python orders str by code point, which is UTF-8 byte order
        std::sort(items.begin(), items.end(), [](const auto* x, const auto* y) { return x->first < y->first; });
      }
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) append_checked(out, opt.item_sep);
        append_checked(out, nl + json_string(items[k]->first, opt.ensure_ascii) + opt.key_sep);
        json_into(items[k]->second, opt, depth + 1, out);
      }
      append_checked(out, nl_end + "}");
      return;
    }
    case Kind::kUndefined:
    case Kind::kNamespace:
    case Kind::kCallable:
      render_fail(fmt::format("Object of type {} is not JSON serializable",
                              v.kind == Kind::kUndefined ? "Undefined" : v.kind == Kind::kNamespace ? "Namespace" : "function"));
  }
}

void repr_into(const Value& v, int depth, std::string& out) {
  switch (v.kind) {
    case Kind::kString: append_checked(out, str_repr(v.s)); return;
    case Kind::kUndefined: out += "Undefined"; return;
    case Kind::kList: {
      if (depth >= limits::kMaxValueDepth) too_deep();
      out += v.is_tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        repr_into((*v.list)[k], depth + 1, out);
      }
      if (v.is_tuple && v.list->size() == 1) out += ",";
      append_checked(out, v.is_tuple ? ")" : "]");
      return;
    }
    case Kind::kDict: {
      if (depth >= limits::kMaxValueDepth) too_deep();
      out += "{";
      for (size_t k = 0; k < v.dict->size(); ++k) {
        if (k) out += ", ";
        append_checked(out, str_repr((*v.dict)[k].first) + ": ");
        repr_into((*v.dict)[k].second, depth + 1, out);
      }
      append_checked(out, "}");
      return;
    }
    case Kind::kNamespace: {
      // jinja2's Namespace.__repr__: "<Namespace {...}>" around the repr of its attributes.
      Value attrs = v;
      attrs.kind = Kind::kDict;
      out += "<Namespace ";
      repr_into(attrs, depth, out);
      out += ">";
      return;
    }
    default: append_checked(out, to_str(v));
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& opt) {
  std::string out;
  json_into(v, opt, 0, out);
  return out;
}

std::string to_repr(const Value& v) {
  std::string out;
  repr_into(v, 0, out);
  return out;
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return v.b ? "True" : "False";
    case Kind::kInt: return std::to_string(v.i);
    case Kind::kFloat: return float_repr(v.f);
    case Kind::kString: return v.s;
    case Kind::kList:
    case Kind::kDict:
    case Kind::kNamespace: return to_repr(v);
    case Kind::kCallable: return "<function>";
  }
  return "";
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool object";
    case Kind::kInt: return "int object";
    case Kind::kFloat: return "float object";
    case Kind::kString: return "str object";
    case Kind::kList: return v.is_tuple ? "tuple object" : "list object";
    case Kind::kDict: return "dict object";
    case Kind::kNamespace: return "Namespace object";
    case Kind::kCallable: return "function object";
  }
  return "object";
}

void check_defined(const Value& v) {
  if (v.is_undefined()) render_fail(v.s);
}

namespace {
double as_double(const Value& v) { return v.kind == Kind::kFloat ? v.f : v.kind == Kind::kInt ? static_cast<double>(v.i) : v.b ? 1 : 0; }
}  // namespace

namespace {
bool equals_at(const Value& a, const Value& b, int depth);
bool less_at(const Value& a, const Value& b, int depth);
}  // namespace

bool equals(const Value& a, const Value& b) { return equals_at(a, b, 0); }
bool less(const Value& a, const Value& b) { return less_at(a, b, 0); }

bool less_equal(const Value& a, const Value& b) {
  // Python compares lists item by item and orders them by the first pair that differs (or by
  // length), so [None] <= [None] holds; anywhere else the pair must be orderable.
  if (a.kind == Kind::kList && b.kind == Kind::kList && a.is_tuple == b.is_tuple) {
    for (size_t k = 0; k < a.list->size() && k < b.list->size(); ++k) {
      if (!equals((*a.list)[k], (*b.list)[k])) return less((*a.list)[k], (*b.list)[k]);
    }
    return a.list->size() <= b.list->size();
  }
  const bool orderable = (a.is_number() && b.is_number()) || (a.kind == Kind::kString && b.kind == Kind::kString);
  if (!orderable) {
    check_defined(a);
    check_defined(b);
    render_fail(fmt::format("'<=' not supported between instances of '{}' and '{}'", type_name(a), type_name(b)));
  }
  return less(a, b) || equals(a, b);
}

namespace {

bool equals_at(const Value& a, const Value& b, int depth) {
  charge_steps(1);
  if (a.is_number() && b.is_number()) {
    if (a.kind != Kind::kFloat && b.kind != Kind::kFloat) {
      return (a.kind == Kind::kInt ? a.i : a.b) == (b.kind == Kind::kInt ? b.i : b.b);
    }
    return as_double(a) == as_double(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.s == b.s;
    case Kind::kList:
      if (a.is_tuple != b.is_tuple || a.list->size() != b.list->size()) return false;
      if (depth >= limits::kMaxValueDepth) too_deep();
      for (size_t k = 0; k < a.list->size(); ++k) {
        if (!equals_at((*a.list)[k], (*b.list)[k], depth + 1)) return false;
      }
      return true;
    case Kind::kDict:
      if (a.dict->size() != b.dict->size()) return false;
      if (depth >= limits::kMaxValueDepth) too_deep();
      for (const auto& [k, v] : *a.dict) {
        const Value* other = b.find(k);
        if (!other || !equals_at(v, *other, depth + 1)) return false;
      }
      return true;
    default: return a.dict == b.dict && a.fn == b.fn;
  }
}

bool less_at(const Value& a, const Value& b, int depth) {
  charge_steps(1);
  if (a.is_number() && b.is_number()) {
    if (a.kind != Kind::kFloat && b.kind != Kind::kFloat) {
      return (a.kind == Kind::kInt ? a.i : a.b) < (b.kind == Kind::kInt ? b.i : b.b);
    }
    return as_double(a) < as_double(b);
  }
  if (a.kind == Kind::kString && b.kind == Kind::kString) return a.s < b.s;  // UTF-8 keeps code point order
  if (a.kind == Kind::kList && b.kind == Kind::kList && a.is_tuple == b.is_tuple) {  // list < tuple raises
    if (depth >= limits::kMaxValueDepth) too_deep();
    for (size_t k = 0; k < a.list->size() && k < b.list->size(); ++k) {
      if (!equals_at((*a.list)[k], (*b.list)[k], depth + 1)) return less_at((*a.list)[k], (*b.list)[k], depth + 1);
    }
    return a.list->size() < b.list->size();
  }
  check_defined(a);
  check_defined(b);
  render_fail(fmt::format("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b)));
}

}  // namespace

List iterate(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return {};
    case Kind::kList: charge_steps(v.list->size()); return *v.list;
    case Kind::kDict: {
      charge_steps(v.dict->size());
      List keys;
      for (const auto& [k, val] : *v.dict) keys.push_back(Value::string(k));
      return keys;
    }
    case Kind::kString: {
      check_list_size(utf8_length(v.s));
      List chars;
      for (auto& c : utf8_chars(v.s)) chars.push_back(Value::string(std::move(c)));
      return chars;
    }
    default: render_fail(fmt::format("'{}' is not iterable", type_name(v)));
  }
}

// Recursion over the JSON variables is bounded by limits::kMaxValueDepth (their nesting comes
// from the HTTP client).
template <typename J>
Value from_json_impl(const J& j, int depth) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return Value::integer(static_cast<int64_t>(j.template get<uint64_t>()));
    case nlohmann::json::value_t::number_float: return Value::real(j.template get<double>());
    case nlohmann::json::value_t::string:
      check_string_size(j.template get_ref<const std::string&>().size());
      return Value::string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      if (depth >= limits::kMaxValueDepth) too_deep();
      check_list_size(j.size());
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_impl(e, depth + 1));
      return Value::make_list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      if (depth >= limits::kMaxValueDepth) too_deep();
      check_list_size(j.size());
      Dict items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), from_json_impl(it.value(), depth + 1));
      return Value::make_dict(std::move(items));
    }
    default: return Value::none();
  }
}

Value from_json(const nlohmann::ordered_json& j) { return from_json_impl(j, 0); }
Value from_json(const nlohmann::json& j) { return from_json_impl(j, 0); }

std::vector<std::string> utf8_chars(const std::string& s) {
  charge_steps(s.size() / 16);  // one small string per character: dearer than copying bytes
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t start = pos;
    decode(s, pos);
    out.push_back(s.substr(start, pos - start));
  }
  return out;
}

void utf8_next(const std::string& s, size_t& pos) { decode(s, pos); }

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool is_py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<std::string> cs = utf8_chars(s);
  std::vector<std::string> set;
  const bool by_set = chars && chars->kind != Kind::kNone && !chars->is_undefined();
  if (by_set) set = utf8_chars(to_str(*chars));
  auto strip_me = [&](const std::string& c) {
    if (by_set) return std::find(set.begin(), set.end(), c) != set.end();
    size_t pos = 0;
    return is_py_space(decode(c, pos));
  };
  size_t b = 0, e = cs.size();
  if (left) {
    while (b < e && strip_me(cs[b])) ++b;
  }
  if (right) {
    while (e > b && strip_me(cs[e - 1])) --e;
  }
  std::string out;
  for (size_t k = b; k < e; ++k) out += cs[k];
  return out;
}

std::string ascii_upper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
  }
  return s;
}

std::string ascii_lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  }
  return s;
}

}  // namespace sampan::chat
