// jinja2's built-in filters and tests, with transformers' tojson.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "engine/chat/builtins.h"
#include "engine/chat/limits.h"

namespace sampan::chat {
namespace {

int64_t as_int(const Value& v) { return v.kind == Kind::kInt ? v.i : v.kind == Kind::kBool ? v.b : static_cast<int64_t>(v.f); }

// out += piece, unless the result would pass limits::kMaxStringBytes.
void append_checked(std::string& out, const std::string& piece) {
  const uint64_t total = static_cast<uint64_t>(out.size()) + piece.size();
  if (total > limits::kMaxStringBytes) check_string_size(total);  // fails
  charge_bytes(piece.size());  // only the bytes copied now: building piece by piece stays linear
  out += piece;
}

Value arg_or(CallArgs& a, size_t index, const char* name, const Value& def) {
  const Value* v = a.get(index, name);
  return v ? *v : def;
}

// A filter's `attribute` argument: jinja2's make_attrgetter treats attribute=None as no
// attribute (the item itself).
const Value* attribute_arg(CallArgs& a, size_t index) {
  const Value* v = a.get(index, "attribute");
  return v && v->kind == Kind::kNone ? nullptr : v;
}

// jinja2's make_attrgetter: "a.b" walks attributes, digits index lists.
Value attr_path(const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = get_item(cur, digits ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

std::string title_case(const std::string& s, bool only_first) {
  std::string out = s;
  bool word_start = true;
  for (size_t k = 0; k < out.size(); ++k) {
    char& c = out[k];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (only_first) {
      c = static_cast<char>(k == 0 ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
      continue;
    }
    if (word_start && letter) {
      c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    } else if (letter) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    // jinja2's title() starts a word after whitespace and the brackets -({[<
    word_start = c == ' ' || (c >= '\t' && c <= '\r') || c == '-' || c == '(' || c == '{' || c == '[' || c == '<' ||
                 (word_start && !letter && !(c & 0x80) && false);
  }
  return out;
}

List select_items(const Value& seq, CallArgs& a, bool by_attr, bool keep) {
  List out;
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (a.pos.empty()) render_fail("Missing parameter for attribute name");
    attr = to_str(a.pos[0]);
    next = 1;
  }
  std::string test;
  CallArgs test_args;
  if (next < a.pos.size()) {
    test = to_str(a.pos[next]);
    test_args.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(next + 1), a.pos.end());
  }
  for (const Value& item : iterate(seq)) {
    const Value v = by_attr ? attr_path(item, attr) : item;
    CallArgs ta = test_args;
    const bool ok = test.empty() ? truthy(v) : apply_test(test, v, ta);
    if (ok == keep) out.push_back(item);
  }
  return out;
}

std::string do_indent(const std::string& s, const Value& width, bool first, bool blank) {
  // As jinja2: append "\n", split into lines (dropping the last empty one), indent every line
  // but the first (blank ones only with blank=True), then the first one if first=True.
  std::string pad;
  if (width.kind == Kind::kString) {
    pad = width.s;
  } else {
    const int64_t w = std::max<int64_t>(as_int(width), 0);  // Python: ' ' * -1 == ''
    check_string_size(static_cast<uint64_t>(w));
    pad.assign(static_cast<size_t>(w), ' ');
  }
  const std::string src = s + "\n";
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl = src.find('\n'); nl != std::string::npos; nl = src.find('\n', start)) {
    lines.push_back(src.substr(start, nl - start));
    start = nl + 1;
  }
  std::string out = first ? pad : "";
  append_checked(out, lines[0]);
  for (size_t k = 1; k < lines.size(); ++k) {
    std::string line(1, '\n');
    if (blank || !lines[k].empty()) line += pad;
    line += lines[k];
    append_checked(out, line);
  }
  return out;
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, CallArgs& a) {
  static const Value kNone = Value::none();
  static const Value kFalse = Value::boolean(false);
  static const Value kEmpty = Value::string("");
  if (name == "safe" || name == "string") return name == "safe" ? v : Value::string(to_str(v));
  if (name == "trim") {
    const Value* chars = a.get(0, "chars");  // passed to str.strip as is: None or a str
    if (chars && chars->kind != Kind::kNone && chars->kind != Kind::kString) {
      check_defined(*chars);
      render_fail(fmt::format("strip arg must be None or str, not {}", type_name(*chars)));
    }
    return Value::string(py_strip(to_str(v), chars, true, true));
  }
  if (name == "length" || name == "count") {
    if (v.kind == Kind::kString) return Value::integer(static_cast<int64_t>(utf8_length(v.s)));
    if (v.kind == Kind::kList) return Value::integer(static_cast<int64_t>(v.list->size()));
    if (v.kind == Kind::kDict) return Value::integer(static_cast<int64_t>(v.dict->size()));
    if (v.is_undefined()) return Value::integer(0);
    render_fail(fmt::format("object of type '{}' has no len()", type_name(v)));
  }
  if (name == "upper") return Value::string(ascii_upper(to_str(v)));
  if (name == "lower") return Value::string(ascii_lower(to_str(v)));
  if (name == "title") return Value::string(title_case(to_str(v), false));
  if (name == "capitalize") return Value::string(title_case(to_str(v), true));
  if (name == "replace") {
    CallArgs m;
    // jinja2's replace filter converts its arguments with str() before calling str.replace.
    m.pos.push_back(Value::string(to_str(arg_or(a, 0, "old", kEmpty))));
    m.pos.push_back(Value::string(to_str(arg_or(a, 1, "new", kEmpty))));
    if (const Value* c = a.get(2, "count")) m.pos.push_back(*c);
    Value s = get_attr(Value::string(to_str(v)), "replace");
    return (*s.fn)(m);
  }
  if (name == "join") {
    const std::string sep = to_str(arg_or(a, 0, "d", kEmpty));
    const Value* attr = attribute_arg(a, 1);
    std::string out;
    List items = iterate(v);
    for (size_t k = 0; k < items.size(); ++k) {
      append_checked(out, (k ? sep : "") + to_str(attr ? attr_path(items[k], to_str(*attr)) : items[k]));
    }
    return Value::string(out);
  }
  if (name == "first" || name == "last") {
    List items = iterate(v);
    if (items.empty()) return Value::undefined(fmt::format("No {} item, sequence was empty.", name));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "default" || name == "d") {
    const bool boolean = truthy(arg_or(a, 1, "boolean", kFalse));
    if (v.is_undefined() || (boolean && !truthy(v))) return arg_or(a, 0, "default_value", kEmpty);
    return v;
  }
  if (name == "tojson") {
    // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    // passes these to json.dumps, which takes its separators (', ', ': ') or, with an indent,
    // (',', ': ') unless given.
    JsonOptions opt;
    opt.ensure_ascii = truthy(arg_or(a, 0, "ensure_ascii", kFalse));
    const Value indent = arg_or(a, 1, "indent", kNone);
    if (indent.kind == Kind::kString) {
      opt.pretty = true;
      opt.indent_unit = indent.s;
    } else if (indent.kind == Kind::kInt || indent.kind == Kind::kBool) {
      const int64_t w = std::max<int64_t>(as_int(indent), 0);  // Python: ' ' * -1 == ''
      check_string_size(static_cast<uint64_t>(w));
      opt.pretty = true;
      opt.indent_unit.assign(static_cast<size_t>(w), ' ');
    } else if (indent.kind != Kind::kNone) {
      render_unsupported("tojson with an indent that is neither an integer nor a string");
    }
    if (opt.pretty) opt.item_sep = ",";
    const Value seps = arg_or(a, 2, "separators", kNone);
    if (seps.kind != Kind::kNone) {
      if (seps.kind != Kind::kList || seps.list->size() != 2 || (*seps.list)[0].kind != Kind::kString ||
          (*seps.list)[1].kind != Kind::kString) {
        render_fail("tojson separators must be a pair of strings");
      }
      opt.item_sep = (*seps.list)[0].s;
      opt.key_sep = (*seps.list)[1].s;
    }
    opt.sort_keys = truthy(arg_or(a, 3, "sort_keys", kFalse));
    return Value::string(to_json(v, opt));
  }
  if (name == "int" || name == "float") check_defined(v);  // int(Undefined) raises, not a conversion error
  if (name == "int") {
    const Value& def = arg_or(a, 0, "default", Value::integer(0));
    if (v.kind == Kind::kInt || v.kind == Kind::kBool) return Value::integer(as_int(v));
    if (v.kind == Kind::kFloat) return std::isfinite(v.f) ? Value::integer(static_cast<int64_t>(v.f)) : def;
    if (v.kind == Kind::kString) {
      const std::string s = py_strip(v.s, nullptr, true, true);
      char* end = nullptr;
      const long long x = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && *end == '\0') return Value::integer(x);
      const double f = std::strtod(s.c_str(), &end);
      if (!s.empty() && *end == '\0' && std::isfinite(f)) return Value::integer(static_cast<int64_t>(f));
    }
    return def;
  }
  if (name == "float") {
    const Value& def = arg_or(a, 0, "default", Value::real(0));
    if (v.is_number()) return Value::real(v.kind == Kind::kFloat ? v.f : static_cast<double>(as_int(v)));
    if (v.kind == Kind::kString) {
      const std::string s = py_strip(v.s, nullptr, true, true);
      char* end = nullptr;
      const double f = std::strtod(s.c_str(), &end);
      if (!s.empty() && *end == '\0') return Value::real(f);
    }
    return def;
  }
  if (name == "list") return Value::make_list(iterate(v));
  if (name == "items") {
    if (v.is_undefined()) return Value::make_list({});
    if (v.kind != Kind::kDict) render_fail(fmt::format("Can only get item pairs from a mapping, not {}", type_name(v)));
    CallArgs none;
    return (*get_attr(v, "items").fn)(none);
  }
  // jinja2's select, reject, selectattr, rejectattr and map start with `if value:`, so a false
  // value (None, undefined, 0, '', []) gives an empty sequence without being iterated and
  // without their arguments being checked.
  if ((name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject" || name == "map") &&
      !truthy(v)) {
    return Value::make_list({});
  }
  if (name == "selectattr" || name == "rejectattr") return Value::make_list(select_items(v, a, true, name == "selectattr"));
  if (name == "select" || name == "reject") return Value::make_list(select_items(v, a, false, name == "select"));
  if (name == "map") {
    List out;
    if (a.get(99, "attribute") && a.get(99, "attribute")->kind == Kind::kNone) {
      // map(attribute=None): jinja2 maps every item to itself.
      const Value* def = a.get(99, "default");
      for (const Value& item : iterate(v)) out.push_back(item.is_undefined() && def ? *def : item);
      return Value::make_list(std::move(out));
    }
    if (const Value* attr = a.get(99, "attribute")) {
      const Value* def = a.get(99, "default");
      for (const Value& item : iterate(v)) {
        Value x = attr_path(item, to_str(*attr));
        out.push_back(x.is_undefined() && def ? *def : x);
      }
      return Value::make_list(std::move(out));
    }
    if (a.pos.empty()) render_fail("map requires a filter argument");
    const std::string f = to_str(a.pos[0]);
    for (const Value& item : iterate(v)) {
      CallArgs fa;
      fa.pos.assign(a.pos.begin() + 1, a.pos.end());
      fa.kw = a.kw;
      out.push_back(apply_filter(f, item, fa));
    }
    return Value::make_list(std::move(out));
  }
  if (name == "e" || name == "escape") {
    std::string out;
    const std::string in = to_str(v);
    check_string_size(in.size());
    for (char c : in) {
      if (out.size() >= limits::kMaxStringBytes) check_string_size(out.size() + 1);
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&#34;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
      }
    }
    return Value::string(out);
  }
  if (name == "indent") {
    // jinja2's indent appends "\n" to its argument: anything but a string raises (None + str,
    // Undefined + str).
    if (v.kind != Kind::kString) {
      check_defined(v);
      render_fail(fmt::format("unsupported operand type(s) for +=: '{}' and 'str'", type_name(v)));
    }
    return Value::string(do_indent(to_str(v), arg_or(a, 0, "width", Value::integer(4)), truthy(arg_or(a, 1, "first", kFalse)),
                                   truthy(arg_or(a, 2, "blank", kFalse))));
  }
  if (name == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (unsigned char c : to_str(v)) {
      const bool w = std::isalnum(c) || c == '_' || c >= 0x80;
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value::integer(n);
  }
  if (name == "abs") {
    if (v.kind == Kind::kFloat) return Value::real(std::fabs(v.f));
    if (v.kind == Kind::kInt || v.kind == Kind::kBool) return Value::integer(std::llabs(as_int(v)));
    render_fail(fmt::format("bad operand type for abs(): '{}'", type_name(v)));
  }
  if (name == "round") {
    const int64_t prec = as_int(arg_or(a, 0, "precision", Value::integer(0)));
    const std::string method = to_str(arg_or(a, 1, "method", Value::string("common")));
    if (v.kind == Kind::kInt || v.kind == Kind::kBool) {
      if (method == "common") return Value::integer(as_int(v));
      return Value::real(static_cast<double>(as_int(v)));
    }
    if (v.kind != Kind::kFloat) render_fail(fmt::format("type {} doesn't define __round__ method", type_name(v)));
    const double scale = std::pow(10.0, static_cast<double>(prec));
    const double x = v.f * scale;
    const double r = method == "common" ? std::nearbyint(x) : method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : NAN;
    if (std::isnan(r)) render_fail("method must be common, ceil or floor");
    return Value::real(r / scale);
  }
  if (name == "sort" || name == "unique" || name == "min" || name == "max") {
    const bool reverse = name == "sort" && truthy(arg_or(a, 0, "reverse", kFalse));
    const bool case_sensitive = truthy(arg_or(a, name == "sort" ? 1 : 0, "case_sensitive", kFalse));
    const Value* attr = attribute_arg(a, name == "sort" ? 2 : 99);
    auto key = [&](const Value& item) {
      Value k = attr ? attr_path(item, to_str(*attr)) : item;
      if (!case_sensitive && k.kind == Kind::kString) k.s = ascii_lower(k.s);
      return k;
    };
    List items = iterate(v);
    if (name == "unique") {
      List out, seen;
      for (const Value& item : items) {
        const Value k = key(item);
        // jinja2 keeps the keys seen in a set: lists and dicts are unhashable.
        if (k.kind == Kind::kDict || (k.kind == Kind::kList && !k.is_tuple)) {
          render_fail(fmt::format("unhashable type: '{}'", k.kind == Kind::kList ? "list" : "dict"));
        }
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
          seen.push_back(k);
          out.push_back(item);
        }
      }
      return Value::make_list(std::move(out));
    }
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      return reverse ? less(key(y), key(x)) : less(key(x), key(y));
    });
    if (name == "sort") return Value::make_list(std::move(items));
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    return name == "min" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.kind == Kind::kString) {
      auto chars = utf8_chars(v.s);
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
      return Value::string(out);
    }
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::make_list(std::move(items));
  }
  if (name == "sum") {
    Value total = arg_or(a, 1, "start", Value::integer(0));
    const Value* attr = attribute_arg(a, 0);
    for (const Value& item : iterate(v)) total = binary_op("+", total, attr ? attr_path(item, to_str(*attr)) : item);
    return total;
  }
  if (name == "dictsort") {
    if (v.kind != Kind::kDict) render_fail("You can only sort by either \"key\" or \"value\"");
    CallArgs none;
    List items = *(*get_attr(v, "items").fn)(none).list;
    const bool by_value = to_str(arg_or(a, 1, "by", Value::string("key"))) == "value";
    const bool case_sensitive = truthy(arg_or(a, 0, "case_sensitive", kFalse));
    const bool reverse = truthy(arg_or(a, 2, "reverse", kFalse));
    auto key = [&](const Value& kv) {
      Value k = (*kv.list)[by_value ? 1 : 0];
      if (!case_sensitive && k.kind == Kind::kString) k.s = ascii_lower(k.s);
      return k;
    };
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      return reverse ? less(key(y), key(x)) : less(key(x), key(y));
    });
    return Value::make_list(std::move(items));
  }
  if (name == "center" || name == "format" || name == "truncate" || name == "wordwrap" || name == "urlencode" ||
      name == "batch" || name == "slice" || name == "groupby" || name == "pprint" || name == "xmlattr" ||
      name == "filesizeformat" || name == "striptags" || name == "urlize" || name == "random" || name == "forceescape" ||
      name == "attr") {
    render_unsupported("filter '" + name + "'");
  }
  render_unsupported("filter '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v, CallArgs& a) {
  auto arg = [&]() -> const Value& {
    if (a.pos.empty()) render_fail(fmt::format("test '{}' needs an argument", name));
    return a.pos[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.kind == Kind::kNone;
  if (name == "string") return v.kind == Kind::kString;
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == Kind::kInt;
  if (name == "float") return v.kind == Kind::kFloat;
  if (name == "boolean") return v.kind == Kind::kBool;
  if (name == "true") return v.kind == Kind::kBool && v.b;
  if (name == "false") return v.kind == Kind::kBool && !v.b;
  if (name == "mapping") return v.kind == Kind::kDict;
  if (name == "iterable" || name == "sequence") {
    return v.kind == Kind::kString || v.kind == Kind::kList || v.kind == Kind::kDict || v.is_undefined();
  }
  if (name == "callable") return v.kind == Kind::kCallable || v.is_undefined();  // Undefined defines __call__
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, arg());
  if (name == "ne" || name == "!=") return !equals(v, arg());
  if (name == "lt" || name == "lessthan" || name == "<") return less(v, arg());
  if (name == "le" || name == "<=") return less_equal(v, arg());
  if (name == "gt" || name == "greaterthan" || name == ">") return less(arg(), v);
  if (name == "ge" || name == ">=") return less_equal(arg(), v);
  if (name == "in") return contains(arg(), v);
  if (name == "sameas") {
    const Value& o = arg();
    if (v.kind != o.kind) return false;
    if (v.kind == Kind::kList) return v.list == o.list;
    if (v.kind == Kind::kDict || v.kind == Kind::kNamespace) return v.dict == o.dict;
    return equals(v, o);
  }
  if (name == "even" || name == "odd" || name == "divisibleby") {
    if (!(v.kind == Kind::kInt || v.kind == Kind::kBool)) {
      check_defined(v);
      render_fail(fmt::format("unsupported operand type(s) for %: '{}' and 'int'", type_name(v)));
    }
    const int64_t x = as_int(v);
    if (name == "even") return x % 2 == 0;
    if (name == "odd") return x % 2 != 0;
    const int64_t d = as_int(arg());
    if (d == 0) render_fail("integer division or modulo by zero");
    return x % d == 0;
  }
  if (name == "lower" || name == "upper") {
    // str(v).islower() / isupper(): at least one cased character, none of the other case (ASCII
    // letters are the cased characters here, as the lower and upper filters convert only them).
    bool cased = false, other = false;
    for (unsigned char c : to_str(v)) {
      const bool lo = c >= 'a' && c <= 'z', up = c >= 'A' && c <= 'Z';
      cased = cased || lo || up;
      other = other || (name == "lower" ? up : lo);
    }
    return cased && !other;
  }
  if (name == "escaped") return false;
  render_unsupported("test '" + name + "'");
}

}  // namespace sampan::chat
