// Attribute and item access, operators and globals (filters and tests live in filters.cc).
#include "engine/chat/builtins.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <ctime>

#include "engine/chat/limits.h"

namespace sampan::chat {
namespace {

int64_t as_int(const Value& v) { return v.kind == Kind::kInt ? v.i : v.kind == Kind::kBool ? v.b : static_cast<int64_t>(v.f); }
double as_num(const Value& v) { return v.kind == Kind::kFloat ? v.f : static_cast<double>(as_int(v)); }
bool is_intlike(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kBool; }

std::string py_type(const Value& v) {
  std::string t = type_name(v);
  const size_t sp = t.find(" object");
  return sp == std::string::npos ? (v.kind == Kind::kNone ? "NoneType" : t) : t.substr(0, sp);
}

// out += piece, unless the result would pass limits::kMaxStringBytes.
void append_checked(std::string& out, const std::string& piece) {
  const uint64_t total = static_cast<uint64_t>(out.size()) + piece.size();
  if (total > limits::kMaxStringBytes) check_string_size(total);  // fails
  charge_bytes(piece.size());  // only the bytes copied now: building piece by piece stays linear
  out += piece;
}

// Fails once a list being built item by item reaches limits::kMaxListItems.
void check_growing(const List& l) {
  if (l.size() >= limits::kMaxListItems) check_list_size(l.size() + 1);
}

// x * n for string or list repetition, saturating instead of overflowing.
uint64_t repeat_size(uint64_t x, int64_t n) {
  if (n <= 0) return 0;
  uint64_t r = 0;
  if (__builtin_mul_overflow(x, static_cast<uint64_t>(n), &r)) return UINT64_MAX;
  return r;
}

[[noreturn]] Value int_overflow() { render_unsupported("integer arithmetic beyond 64 bits"); }

// A str method's argument: Python's str methods take only str there (no str() conversion as
// jinja2's filters make), so None, numbers and Undefined raise TypeError.
const std::string& str_arg(const Value* v, const char* method) {
  if (!v) render_fail(fmt::format("{}() takes at least 1 argument (0 given)", method));
  if (v->kind != Kind::kString) render_fail(fmt::format("{}() argument must be str, not {}", method, py_type(*v)));
  return v->s;
}

// A str method's optional argument that may also be None (strip's chars, split's sep).
const Value* str_or_none_arg(const Value* v, const char* method) {
  if (v && v->kind != Kind::kNone) str_arg(v, method);
  return v;
}

Value missing_attr(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", type_name(obj), name));
}

// Python's str.split / rsplit-free subset.
List split(const std::string& s, const Value* sep, int64_t maxsplit) {
  List out;
  if (!sep || sep->kind == Kind::kNone) {
    size_t k = 0;
    while (k < s.size()) {
      while (k < s.size() && (s[k] == ' ' || (s[k] >= '\t' && s[k] <= '\r'))) ++k;
      if (k >= s.size()) break;
      check_growing(out);
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = s.size();
        while (e > k && (s[e - 1] == ' ' || (s[e - 1] >= '\t' && s[e - 1] <= '\r'))) --e;
        out.push_back(Value::string(s.substr(k, e - k)));
        return out;
      }
      size_t e = k;
      while (e < s.size() && !(s[e] == ' ' || (s[e] >= '\t' && s[e] <= '\r'))) ++e;
      out.push_back(Value::string(s.substr(k, e - k)));
      k = e;
    }
    return out;
  }
  const std::string d = to_str(*sep);
  if (d.empty()) render_fail("empty separator");
  size_t start = 0;
  for (;;) {
    check_growing(out);
    const size_t f = (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) ? std::string::npos : s.find(d, start);
    if (f == std::string::npos) {
      out.push_back(Value::string(s.substr(start)));
      return out;
    }
    out.push_back(Value::string(s.substr(start, f - start)));
    start = f + d.size();
  }
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends).
    auto chars = utf8_chars(s);
    int64_t n = 0;
    for (size_t k = 0; k <= chars.size(); ++k) {
      if (count < 0 || n < count) {
        append_checked(out, to);
        ++n;
      }
      if (k < chars.size()) append_checked(out, chars[k]);
    }
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  for (;;) {
    const size_t f = (count >= 0 && n >= count) ? std::string::npos : s.find(from, start);
    if (f == std::string::npos) {
      append_checked(out, s.substr(start));
      return out;
    }
    append_checked(out, s.substr(start, f - start) + to);
    start = f + from.size();
    ++n;
  }
}

bool affix_match(const std::string& s, const Value& x, bool prefix) {
  auto one = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (x.kind == Kind::kList) {
    for (const Value& a : *x.list) {
      if (a.kind != Kind::kString) render_fail(fmt::format("tuple for startswith must only contain str, not {}", py_type(a)));
      if (one(a.s)) return true;
    }
    return false;
  }
  if (x.kind != Kind::kString) render_fail("startswith first arg must be str or a tuple of str");
  return one(x.s);
}

std::string py_format(const std::string& fmt_s, const CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t k = 0; k < fmt_s.size(); ++k) {
    const char c = fmt_s[k];
    if (c == '{' && k + 1 < fmt_s.size() && fmt_s[k + 1] == '{') {
      out += '{';
      ++k;
    } else if (c == '}' && k + 1 < fmt_s.size() && fmt_s[k + 1] == '}') {
      out += '}';
      ++k;
    } else if (c == '{') {
      const size_t e = fmt_s.find('}', k);
      if (e == std::string::npos) render_fail("Single '{' encountered in format string");
      const std::string field = fmt_s.substr(k + 1, e - k - 1);
      if (field.find_first_of(":!.[") != std::string::npos) render_unsupported("str.format field '{" + field + "}'");
      const Value* v = nullptr;
      if (field.empty()) {
        if (auto_idx < a.pos.size()) v = &a.pos[auto_idx++];
      } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
        size_t idx = 0;
        for (char ch : field) {
          if (ch < '0' || ch > '9' || idx > a.pos.size()) {
            idx = a.pos.size();
            break;
          }
          idx = idx * 10 + static_cast<size_t>(ch - '0');
        }
        if (idx < a.pos.size()) v = &a.pos[idx];
      } else {
        for (const auto& [kk, vv] : a.kw) {
          if (kk == field) v = &vv;
        }
      }
      if (!v) render_fail("Replacement index out of range for positional args tuple");
      append_checked(out, to_str(*v));
      k = e;
    } else {
      out += c;
    }
  }
  return out;
}

Value string_method(const Value& obj, const std::string& name) {
  charge_bytes(obj.s.size());  // the copy below, and the scan most methods make
  const std::string s = obj.s;
  auto fn = [](auto f) { return Value::function(std::move(f)); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool l = name != "rstrip", r = name != "lstrip";
    return fn([s, l, r](CallArgs& a) { return Value::string(py_strip(s, str_or_none_arg(a.get(0, "chars"), "strip"), l, r)); });
  }
  if (name == "split") {
    return fn([s](CallArgs& a) {
      const Value* m = a.get(1, "maxsplit");
      return Value::make_list(split(s, str_or_none_arg(a.get(0, "sep"), "split"), m ? as_int(*m) : -1));
    });
  }
  if (name == "splitlines") {
    return fn([s](CallArgs&) {
      List out;
      size_t start = 0;
      for (size_t k = 0; k < s.size(); ++k) {
        if (s[k] == '\n' || s[k] == '\r') {
          check_growing(out);
          out.push_back(Value::string(s.substr(start, k - start)));
          if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
          start = k + 1;
        }
      }
      if (start < s.size()) out.push_back(Value::string(s.substr(start)));
      return Value::make_list(std::move(out));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    return fn([s, prefix](CallArgs& a) {
      const Value* x = a.get(0, "prefix");
      if (!x) render_fail("startswith() takes at least 1 argument (0 given)");
      return Value::boolean(affix_match(s, *x, prefix));
    });
  }
  if (name == "upper") return fn([s](CallArgs&) { return Value::string(ascii_upper(s)); });
  if (name == "lower") return fn([s](CallArgs&) { return Value::string(ascii_lower(s)); });
  if (name == "title" || name == "capitalize") {
    const std::string f = name;
    return fn([s, f](CallArgs&) {
      CallArgs none;
      return apply_filter(f, Value::string(s), none);
    });
  }
  if (name == "replace") {
    return fn([s](CallArgs& a) {
      const Value* from = a.get(0, "old");
      const Value* to = a.get(1, "new");
      const Value* count = a.get(2, "count");
      if (!from || !to) render_fail("replace expected at least 2 arguments");
      return Value::string(replace_all(s, str_arg(from, "replace"), str_arg(to, "replace"), count ? as_int(*count) : -1));
    });
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    const std::string f = name;
    return fn([s, f](CallArgs& a) {
      const Value* x = a.get(0, "sub");
      if (!x) render_fail(f + "() takes at least 1 argument (0 given)");
      const std::string sub = str_arg(x, f.c_str());
      if (f == "count") {
        if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s) + 1));
        int64_t n = 0;
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
        return Value::integer(n);
      }
      const size_t p = f == "rfind" ? s.rfind(sub) : s.find(sub);
      if (p == std::string::npos) {
        if (f == "index") render_fail("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(static_cast<int64_t>(utf8_length(s.substr(0, p))));
    });
  }
  if (name == "format") return fn([s](CallArgs& a) { return Value::string(py_format(s, a)); });
  if (name == "join") {
    return fn([s](CallArgs& a) {
      const Value* x = a.get(0, "iterable");
      if (!x) render_fail("join() takes exactly one argument (0 given)");
      std::string out;
      const List items = iterate(*x);
      for (size_t k = 0; k < items.size(); ++k) {
        if (items[k].kind != Kind::kString) {
          render_fail(fmt::format("sequence item {}: expected str instance, {} found", k, py_type(items[k])));
        }
        append_checked(out, (k ? s : "") + items[k].s);
      }
      return Value::string(out);
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
      name == "isupper") {
    const std::string f = name;
    return fn([s, f](CallArgs&) {
      bool any_cased = false, ok = !s.empty();
      for (unsigned char c : s) {
        if (f == "isdigit") ok = ok && std::isdigit(c);
        if (f == "isalpha") ok = ok && std::isalpha(c);
        if (f == "isalnum") ok = ok && std::isalnum(c);
        if (f == "isspace") ok = ok && std::isspace(c);
        if (f == "islower") ok = ok && !std::isupper(c);
        if (f == "isupper") ok = ok && !std::islower(c);
        any_cased = any_cased || std::isalpha(c);
      }
      if (f == "islower" || f == "isupper") ok = ok && any_cased;
      return Value::boolean(ok);
    });
  }
  return missing_attr(obj, name);
}

Value dict_method(const Value& obj, const std::string& name) {
  auto d = obj;
  if (name == "items") {
    return Value::function([d](CallArgs&) {
      List out;
      for (const auto& [k, v] : *d.dict) out.push_back(Value::make_list({Value::string(k), v}, true));
      return Value::make_list(std::move(out));
    });
  }
  if (name == "keys") return Value::function([d](CallArgs&) { return Value::make_list(iterate(d)); });
  if (name == "values") {
    return Value::function([d](CallArgs&) {
      List out;
      for (const auto& kv : *d.dict) out.push_back(kv.second);
      return Value::make_list(std::move(out));
    });
  }
  if (name == "get") {
    return Value::function([d](CallArgs& a) {
      // dict.get takes one or two positional arguments and no keywords.
      if (a.pos.empty() || a.pos.size() > 2 || !a.kw.empty()) {
        render_fail(a.pos.empty() ? "get expected at least 1 argument, got 0"
                                  : fmt::format("get expected at most 2 arguments, got {}", a.pos.size() + a.kw.size()));
      }
      const Value& key = a.pos[0];
      const Value* def = a.pos.size() > 1 ? &a.pos[1] : nullptr;
      const Value* found = key.kind == Kind::kString ? d.find(key.s) : nullptr;
      return found ? *found : def ? *def : Value::none();
    });
  }
  static const char* kMutators[] = {"pop", "popitem", "setdefault", "update", "clear"};
  for (const char* m : kMutators) {
    if (name == m) render_fail(fmt::format("access to attribute '{}' of 'dict' object is unsafe.", name));
  }
  return Value();
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Kind::kUndefined: render_fail(obj.s);
    case Kind::kDict: {
      Value m = dict_method(obj, name);
      if (m.kind == Kind::kCallable) return m;
      const Value* v = obj.find(name);
      return v ? *v : missing_attr(obj, name);
    }
    case Kind::kNamespace: {
      const Value* v = obj.find(name);
      return v ? *v : missing_attr(obj, name);
    }
    case Kind::kString: return string_method(obj, name);
    case Kind::kList: {
      static const char* kMutators[] = {"append", "pop", "insert", "extend", "remove", "clear", "sort", "reverse"};
      for (const char* m : kMutators) {
        if (name == m) render_fail(fmt::format("access to attribute '{}' of 'list' object is unsafe.", name));
      }
      if (name == "index" || name == "count") {
        const Value l = obj;
        const bool idx = name == "index";
        return Value::function([l, idx](CallArgs& a) {
          const Value* x = a.get(0, "value");
          int64_t n = 0;
          for (size_t k = 0; k < l.list->size(); ++k) {
            if (x && equals((*l.list)[k], *x)) {
              if (idx) return Value::integer(static_cast<int64_t>(k));
              ++n;
            }
          }
          if (idx) render_fail("value is not in list");
          return Value::integer(n);
        });
      }
      return missing_attr(obj, name);
    }
    default: return missing_attr(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  check_defined(obj);
  if (obj.kind == Kind::kDict || obj.kind == Kind::kNamespace) {
    if (key.kind == Kind::kString) {
      const Value* v = obj.find(key.s);
      if (v) return *v;
      if (obj.kind == Kind::kDict) {
        Value m = dict_method(obj, key.s);
        if (m.kind == Kind::kCallable) return m;
      }
      return missing_attr(obj, key.s);
    }
    return Value::undefined(fmt::format("'{}' has no element {}", type_name(obj), to_repr(key)));
  }
  if ((obj.kind == Kind::kList || obj.kind == Kind::kString) && is_intlike(key)) {
    int64_t i = as_int(key);
    if (obj.kind == Kind::kList) {
      const auto n = static_cast<int64_t>(obj.list->size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return (*obj.list)[static_cast<size_t>(i)];
    } else {
      // The i-th character as utf8_chars() splits them, found without materialising them all.
      charge_bytes(obj.s.size());
      int64_t n = 0;
      for (size_t p = 0; p < obj.s.size(); ++n) utf8_next(obj.s, p);
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        size_t p = 0;
        for (int64_t k = 0; k < i; ++k) utf8_next(obj.s, p);
        const size_t begin = p;
        utf8_next(obj.s, p);
        return Value::string(obj.s.substr(begin, p - begin));
      }
    }
    return Value::undefined(fmt::format("'{}' has no element {}", type_name(obj), as_int(key)));
  }
  if (key.kind == Kind::kString) return get_attr(obj, key.s);
  return Value::undefined(fmt::format("'{}' has no element {}", type_name(obj), to_repr(key)));
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  check_defined(obj);
  auto opt = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.kind == Kind::kNone) return std::nullopt;
    // Python raises for anything else, an undefined bound too (jinja2 passes it to the slice).
    if (!is_intlike(v)) {
      check_defined(v);
      render_fail(fmt::format("slice {} must be an integer or None", what));
    }
    return as_int(v);
  };
  const auto st = opt(step, "step").value_or(1);
  if (st == 0) render_fail("slice step cannot be zero");
  std::vector<std::string> chars;
  const bool is_str = obj.kind == Kind::kString;
  if (is_str) {
    chars = utf8_chars(obj.s);
  } else if (obj.kind != Kind::kList) {
    render_fail(fmt::format("'{}' object is not subscriptable", py_type(obj)));
  }
  const auto n = static_cast<int64_t>(is_str ? chars.size() : obj.list->size());
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v < 0 ? *v + n : *v;
    if (st > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t b = clamp(opt(start, "start"), st > 0 ? 0 : n - 1);
  const int64_t e = clamp(opt(stop, "stop"), st > 0 ? n : -1);
  std::string s;
  List l;
  for (int64_t k = b; st > 0 ? k < e : k > e; k += st) {
    if (is_str) {
      s += chars[static_cast<size_t>(k)];
    } else {
      l.push_back((*obj.list)[static_cast<size_t>(k)]);
    }
  }
  return is_str ? Value::string(std::move(s)) : Value::make_list(std::move(l), obj.is_tuple);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::kString:
      if (item.kind != Kind::kString) {
        check_defined(item);
        render_fail(fmt::format("'in <string>' requires string as left operand, not {}", py_type(item)));
      }
      charge_bytes(container.s.size());
      return container.s.find(item.s) != std::string::npos;
    case Kind::kList:
      for (const Value& v : *container.list) {
        if (equals(v, item)) return true;
      }
      return false;
    case Kind::kDict: return item.kind == Kind::kString && container.find(item.s) != nullptr;
    case Kind::kUndefined: return false;
    default: render_fail(fmt::format("argument of type '{}' is not iterable", py_type(container)));
  }
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string x = to_str(a);
    const std::string y = to_str(b);
    append_checked(x, y);
    return Value::string(std::move(x));
  }
  if (op == "==") return Value::boolean(equals(a, b));
  if (op == "!=") return Value::boolean(!equals(a, b));
  if (op == "<") return Value::boolean(less(a, b));
  if (op == ">") return Value::boolean(less(b, a));
  if (op == "<=") return Value::boolean(less_equal(a, b));
  if (op == ">=") return Value::boolean(less_equal(b, a));
  if (op == "in") return Value::boolean(contains(b, a));
  if (op == "notin") return Value::boolean(!contains(b, a));
  check_defined(a);
  check_defined(b);
  auto type_error = [&]() -> Value {
    if (op == "+" && a.kind == Kind::kString) render_fail(fmt::format("can only concatenate str (not \"{}\") to str", py_type(b)));
    if (op == "+" && a.kind == Kind::kList && !a.is_tuple) render_fail(fmt::format("can only concatenate list (not \"{}\") to list", py_type(b)));
    render_fail(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, py_type(a), py_type(b)));
  };
  if (a.is_number() && b.is_number()) {
    const bool ints = is_intlike(a) && is_intlike(b);
    const int64_t x = as_int(a), y = as_int(b);
    const double p = as_num(a), q = as_num(b);
    int64_t r = 0;
    if (op == "+") return ints ? (__builtin_add_overflow(x, y, &r) ? int_overflow() : Value::integer(r)) : Value::real(p + q);
    if (op == "-") return ints ? (__builtin_sub_overflow(x, y, &r) ? int_overflow() : Value::integer(r)) : Value::real(p - q);
    if (op == "*") return ints ? (__builtin_mul_overflow(x, y, &r) ? int_overflow() : Value::integer(r)) : Value::real(p * q);
    if (op == "/") {
      if (q == 0) render_fail("division by zero");
      return Value::real(p / q);
    }
    if (op == "//" || op == "%") {
      if (q == 0) render_fail(ints ? "integer division or modulo by zero" : "float modulo");
      if (ints) {
        if (y == -1) {  // x / -1 traps for the smallest int64
          if (op == "%") return Value::integer(0);
          if (__builtin_sub_overflow(int64_t{0}, x, &r)) int_overflow();
          return Value::integer(r);
        }
        int64_t d = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --d;
          m += y;
        }
        return Value::integer(op == "//" ? d : m);
      }
      const double d = std::floor(p / q);
      return Value::real(op == "//" ? d : p - d * q);
    }
    if (op == "**") {
      if (ints && y >= 0) {
        // Square-and-multiply: log2(y) steps however large y is.
        int64_t result = 1, base = x;
        for (int64_t e = y; e > 0; e >>= 1) {
          if ((e & 1) && __builtin_mul_overflow(result, base, &result)) int_overflow();
          // A higher bit of e is left, so |x|**y is at least base * base: too big as well.
          if (e > 1 && __builtin_mul_overflow(base, base, &base)) int_overflow();
        }
        return Value::integer(result);
      }
      return Value::real(std::pow(p, q));
    }
  }
  if (op == "+" && a.kind == Kind::kString && b.kind == Kind::kString) {
    std::string x = a.s;
    append_checked(x, b.s);
    return Value::string(std::move(x));
  }
  if (op == "+" && a.kind == Kind::kList && b.kind == Kind::kList && a.is_tuple == b.is_tuple) {
    check_list_size(static_cast<uint64_t>(a.list->size()) + b.list->size());
    List l = *a.list;
    l.insert(l.end(), b.list->begin(), b.list->end());
    return Value::make_list(std::move(l), a.is_tuple);
  }
  if (op == "*" && (a.kind == Kind::kString || a.kind == Kind::kList) && is_intlike(b)) {
    const int64_t n = as_int(b);
    if (a.kind == Kind::kString) {
      check_string_size(repeat_size(a.s.size(), n));
    } else {
      check_list_size(repeat_size(a.list->size(), n));
    }
    std::string s;
    List l;
    for (int64_t k = 0; k < n; ++k) {
      if (a.kind == Kind::kString) {
        s += a.s;
      } else {
        l.insert(l.end(), a.list->begin(), a.list->end());
      }
    }
    return a.kind == Kind::kString ? Value::string(s) : Value::make_list(std::move(l), a.is_tuple);
  }
  if (op == "*" && is_intlike(a) && (b.kind == Kind::kString || b.kind == Kind::kList)) return binary_op(op, b, a);
  if (op == "%" && a.kind == Kind::kString) render_unsupported("printf-style string formatting ('%')");
  return type_error();
}

Dict make_globals() {
  Dict g;
  g.emplace_back("range", Value::function([](CallArgs& a) {
                   for (const Value& v : a.pos) {
                     if (!is_intlike(v)) render_fail(fmt::format("'{}' object cannot be interpreted as an integer", py_type(v)));
                   }
                   int64_t start = 0, stop = 0, step = 1;
                   if (a.pos.size() == 1) {
                     stop = as_int(a.pos[0]);
                   } else if (a.pos.size() >= 2) {
                     start = as_int(a.pos[0]);
                     stop = as_int(a.pos[1]);
                     if (a.pos.size() > 2) step = as_int(a.pos[2]);
                   } else {
                     render_fail("range expected at least 1 argument, got 0");
                   }
                   if (step == 0) render_fail("range() arg 3 must not be zero");
                   // len(range(...)) without overflow, checked before anything is allocated.
                   const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
                   const __int128 mag = step > 0 ? static_cast<__int128>(step) : -static_cast<__int128>(step);
                   const __int128 len = span <= 0 ? 0 : (span + mag - 1) / mag;
                   if (len > limits::kMaxRange) {
                     render_fail(fmt::format("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", limits::kMaxRange));
                   }
                   charge_steps(static_cast<uint64_t>(len));
                   List out;
                   out.reserve(static_cast<size_t>(len));
                   for (int64_t k = 0; k < static_cast<int64_t>(len); ++k) out.push_back(Value::integer(static_cast<int64_t>(start + static_cast<__int128>(k) * step)));
                   return Value::make_list(std::move(out));
                 }));
  auto make_mapping = [](CallArgs& a) {
    Dict d;
    auto put = [&](const std::string& k, const Value& v) {
      for (auto& kv : d) {
        if (kv.first == k) {
          kv.second = v;
          return;
        }
      }
      d.emplace_back(k, v);
    };
    for (const Value& p : a.pos) {
      if (p.kind != Kind::kDict) render_unsupported("positional argument to dict()/namespace() that is not a dict");
      for (const auto& [k, v] : *p.dict) put(k, v);
    }
    for (const auto& [k, v] : a.kw) put(k, v);
    return d;
  };
  g.emplace_back("namespace", Value::function([make_mapping](CallArgs& a) {
                   Dict d = make_mapping(a);
                   for (const auto& kv : d) {
                     if (!kv.first.empty() && kv.first[0] == '_') {
                       render_fail(fmt::format("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '{}'. Please rename the attribute.", kv.first));
                     }
                   }
                   return Value::make_namespace(std::move(d));
                 }));
  g.emplace_back("dict", Value::function([make_mapping](CallArgs& a) { return Value::make_dict(make_mapping(a)); }));
  g.emplace_back("raise_exception", Value::function([](CallArgs& a) -> Value {
                   const Value* m = a.get(0, "message");
                   render_fail(m ? to_str(*m) : "");
                 }));
  g.emplace_back("strftime_now", Value::function([](CallArgs& a) {
                   const Value* f = a.get(0, "format");
                   if (!f) render_fail("strftime_now() missing 1 required positional argument: 'format'");
                   std::tm tm{};
                   const char* fake = std::getenv("SAMPAN_FAKE_DATE");
                   int y = 0, mo = 0, d = 0;
                   if (fake && std::sscanf(fake, "%d-%d-%d", &y, &mo, &d) == 3) {
                     tm.tm_year = y - 1900;
                     tm.tm_mon = mo - 1;
                     tm.tm_mday = d;
                     tm.tm_hour = 12;
                     std::mktime(&tm);  // fills in the weekday and day of year
                     tm.tm_hour = 0;
                   } else {
                     const std::time_t now = std::time(nullptr);
                     localtime_r(&now, &tm);
                   }
                   const std::string fmt_s = to_str(*f);
                   if (fmt_s.empty()) return Value::string("");
                   std::string buf(fmt_s.size() * 8 + 64, '\0');
                   const size_t n = std::strftime(buf.data(), buf.size(), fmt_s.c_str(), &tm);
                   buf.resize(n);
                   return Value::string(buf);
                 }));
  return g;
}

}  // namespace sampan::chat
