// The values a chat template computes with: Python's types as jinja2 sees them (None, bool, int,
// float, str, list, dict in insertion order, tuple), plus jinja2's Undefined, namespace() objects
// and callables. Lists and dicts are immutable once built (the sandbox forbids mutation), so they
// are shared; a namespace is the one mutable object.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sampan::chat {

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;

struct CallArgs;
using Function = std::function<Value(CallArgs&)>;

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

struct Value {
  Kind kind = Kind::kUndefined;
  bool b = false;
  bool is_tuple = false;  // a list printed as "(a, b)"
  int64_t i = 0;
  double f = 0;
  std::string s;  // the string; for kUndefined, the message jinja2 would raise on misuse
  std::shared_ptr<const List> list;
  std::shared_ptr<Dict> dict;  // kDict (never mutated after construction) and kNamespace
  std::shared_ptr<const Function> fn;

  static Value undefined(std::string why) { Value v; v.s = std::move(why); return v; }
  static Value none() { Value v; v.kind = Kind::kNone; return v; }
  static Value boolean(bool x) { Value v; v.kind = Kind::kBool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = Kind::kInt; v.i = x; return v; }
  static Value real(double x) { Value v; v.kind = Kind::kFloat; v.f = x; return v; }
  static Value string(std::string x) { Value v; v.kind = Kind::kString; v.s = std::move(x); return v; }
  static Value make_list(List items, bool tuple = false);
  static Value make_dict(Dict items);
  static Value make_namespace(Dict items);
  static Value function(Function f);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_number() const { return kind == Kind::kBool || kind == Kind::kInt || kind == Kind::kFloat; }
  const Value* find(const std::string& key) const;  // dict/namespace lookup, nullptr if absent
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Takes the argument at `index` or named `name`, consuming it; nullptr when not given.
  const Value* get(size_t index, const char* name);
};

// Thrown while rendering; the evaluator adds the template location.
struct RenderError {
  bool unsupported = false;
  std::string message;
};
[[noreturn]] void render_fail(std::string message);
[[noreturn]] void render_unsupported(std::string what);

// The budget of the render in progress on this thread (limits.h). Installing a RenderBudget
// starts one; without one, charging is free and only the size limits apply.
struct RenderBudget {
  uint64_t steps = 0;
  RenderBudget* prev = nullptr;
  RenderBudget();
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;
};
// Adds `steps` to the render's work; RenderError once limits::kMaxSteps is passed.
void charge_steps(uint64_t steps);
// Charges the work of copying or scanning `bytes` bytes.
void charge_bytes(uint64_t bytes);
// RenderError when a string of `bytes` bytes would exceed limits::kMaxStringBytes; call before
// building it.
void check_string_size(uint64_t bytes);
// RenderError when a list of `items` items would exceed limits::kMaxListItems.
void check_list_size(uint64_t items);

// Python's bool(x); Undefined is false.
bool truthy(const Value& v);
// Python's str(x) (Undefined prints as ""); repr is used inside containers.
std::string to_str(const Value& v);
std::string to_repr(const Value& v);
std::string float_repr(double x);
// The arguments of json.dumps that transformers' tojson filter passes on.
struct JsonOptions {
  bool pretty = false;       // indent is not None
  std::string indent_unit;   // the indent string (an int n is n spaces)
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool ensure_ascii = false;  // escape non-ASCII characters (Python's ensure_ascii)
  bool sort_keys = false;
};
// json.dumps(x, ...) with those options.
std::string to_json(const Value& v, const JsonOptions& opt);
// "dict object", "str object", ... as jinja2 names types in error messages.
std::string type_name(const Value& v);
// Raises jinja2's UndefinedError when v is undefined.
void check_defined(const Value& v);

bool equals(const Value& a, const Value& b);
// Python's a < b; raises on types Python cannot order.
bool less(const Value& a, const Value& b);
// Python's a <= b: raises on types Python cannot order even when they are equal (None <= None).
bool less_equal(const Value& a, const Value& b);
// Items of something iterable (list, tuple, dict keys, string characters, Undefined = empty).
List iterate(const Value& v);

Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);

// UTF-8 helpers: Python indexes strings by code point.
std::vector<std::string> utf8_chars(const std::string& s);
// Moves `pos` past the character starting there (as utf8_chars splits them).
void utf8_next(const std::string& s, size_t& pos);
size_t utf8_length(const std::string& s);
bool is_py_space(uint32_t cp);
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right);
std::string ascii_upper(std::string s);
std::string ascii_lower(std::string s);

}  // namespace sampan::chat
