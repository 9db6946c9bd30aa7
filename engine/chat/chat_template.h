// Chat templates: the Jinja subset real chat templates use, rendered byte-for-byte as Python's
// jinja2 does (with the options transformers uses: trim_blocks and lstrip_blocks on, undefined
// variables render as empty, `raise_exception` and `strftime_now` available, tojson as
// transformers defines it).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace sampan::chat {

class Template {
 public:
  // Parses `source`; `name` names it in errors ("<name>:<line>:<col>: ..."). An unsupported
  // construct is Error(kUnsupported) naming the construct and where it is; a syntax error is
  // Error(kInvalidArgument).
  static Template parse(const std::string& source, const std::string& name);

  // Renders with the given variables (a JSON object: messages, tools, add_generation_prompt,
  // bos_token, eos_token, ...). raise_exception() in the template becomes Error(kInvalidArgument)
  // carrying its message.
  std::string render(const nlohmann::json& variables) const;
  // The same, keeping the key order of JSON objects as given (what tojson and dict iteration
  // show, as Python's dicts do); nlohmann::json sorts keys.
  std::string render(const nlohmann::ordered_json& variables) const;

  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

 private:
  struct Impl;
  explicit Template(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sampan::chat
