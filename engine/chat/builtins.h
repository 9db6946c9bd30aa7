// jinja2's filters, tests, globals and the Python methods templates call on str, dict and list
// (internal to engine/chat).
#pragma once

#include <string>

#include "engine/chat/value.h"

namespace sampan::chat {

// `obj.name` / `obj[key]` with jinja2's lookup order; a miss is Undefined carrying jinja2's message.
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

Value apply_filter(const std::string& name, const Value& v, CallArgs& args);
bool apply_test(const std::string& name, const Value& v, CallArgs& args);

// The globals transformers provides: range, namespace, dict, raise_exception, strftime_now.
// strftime_now uses the date in the SAMPAN_FAKE_DATE environment variable (YYYY-MM-DD) when set.
Dict make_globals();

// Python's operators on values.
Value binary_op(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);

}  // namespace sampan::chat
