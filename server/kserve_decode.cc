#include "server/kserve_decode.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>

namespace sampan::server {
namespace {

// Row-major flattening of a tensor's "data" (the protocol allows nested arrays).
void flatten(const Json& data, std::vector<const Json*>& out) {
  if (data.is_array()) {
    for (const Json& d : data) flatten(d, out);
  } else {
    out.push_back(&data);
  }
}

[[noreturn]] void bad_tensor(const std::string& name, const std::string& what) {
  throw RequestError(400, name, fmt::format("input '{}': {}", name, what));
}

// The elements of an input's "data", checked against its "shape" and "datatype" (one of
// `datatypes`, the first being the default when none is given).
std::vector<const Json*> tensor_data(const Json& input, const std::string& name,
                                     std::initializer_list<const char*> datatypes) {
  const auto dt = get_string(input, "datatype", name + ".");
  if (dt && std::find_if(datatypes.begin(), datatypes.end(),
                         [&](const char* d) { return *dt == d; }) == datatypes.end())
    bad_tensor(name, fmt::format("datatype must be {}, got {}", fmt::join(datatypes, " or "),
                                 Json(*dt).dump()));
  const auto it = input.find("data");
  if (it == input.end() || it->is_null()) bad_tensor(name, "'data' is required");
  std::vector<const Json*> values;
  flatten(*it, values);
  if (const auto shape = input.find("shape"); shape != input.end() && !shape->is_null()) {
    if (!shape->is_array()) bad_tensor(name, "'shape' must be a list of dimensions");
    uint64_t count = 1;
    for (const Json& d : *shape) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        bad_tensor(name, fmt::format("shape dimension {} is not a non-negative integer",
                                     d.dump()));
      const auto dim = d.get<uint64_t>();
      // The product is compared with a count that fits in memory: past 2^40 it cannot match.
      if (dim != 0 && count > (uint64_t{1} << 40) / dim)
        bad_tensor(name, fmt::format("shape {} holds more elements than the data could",
                                     shape->dump()));
      count *= dim;
    }
    if (count != values.size())
      bad_tensor(name, fmt::format("shape {} holds {} elements but 'data' has {}",
                                   shape->dump(), count, values.size()));
  }
  return values;
}

const Json& single(const std::vector<const Json*>& values, const std::string& name) {
  if (values.size() != 1)
    bad_tensor(name, fmt::format("expected one element (shape [1]), got {}", values.size()));
  return *values[0];
}

}  // namespace

KserveInferRequest parse_kserve_json(const Json& body) {
  KserveInferRequest in;
  in.id = get_string(body, "id").value_or("");
  if (const auto it = body.find("parameters"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) throw RequestError(400, "parameters", "'parameters' must be an object");
    merge_sampling_fields(*it, in.fields, "parameters.");
    if (get_bool(*it, "stream", "parameters.").value_or(false))
      throw RequestError(400, "parameters.stream",
                         "'parameters.stream' is not supported over REST; use gRPC "
                         "ModelStreamInfer or /v1/completions");
  }
  const auto inputs = body.find("inputs");
  if (inputs == body.end() || !inputs->is_array() || inputs->empty())
    throw RequestError(400, "inputs", "'inputs' must be a non-empty list of tensors");
  std::optional<int64_t> max_tokens;
  std::vector<std::string> seen;  // input names, each allowed once
  for (const Json& input : *inputs) {
    if (!input.is_object()) throw RequestError(400, "inputs", "each input must be an object");
    const auto name = get_string(input, "name", "inputs.");
    if (!name) throw RequestError(400, "inputs", "an input has no 'name'");
    if (std::find(seen.begin(), seen.end(), *name) != seen.end())
      throw RequestError(400, *name, fmt::format("input '{}' is given twice", *name));
    seen.push_back(*name);
    if (*name == "text_input") {
      const Json& v = single(tensor_data(input, *name, {"BYTES"}), *name);
      if (!v.is_string()) bad_tensor(*name, "the element must be a string");
      in.text = v.get<std::string>();
      if (in.text->empty()) bad_tensor(*name, "the text is empty");
    } else if (*name == "input_ids") {
      for (const Json* v : tensor_data(input, *name, {"INT32", "INT64"})) {
        if (!v->is_number_integer() || v->get<int64_t>() < 0 ||
            v->get<int64_t>() > std::numeric_limits<int32_t>::max())
          bad_tensor(*name, "elements must be token ids (integers in [0, 2^31))");
        in.ids.push_back(v->get<int32_t>());
      }
      if (in.ids.empty()) bad_tensor(*name, "no token ids");
    } else if (*name == "max_tokens") {
      const Json& v = single(tensor_data(input, *name, {"INT32", "INT64"}), *name);
      if (!v.is_number_integer()) bad_tensor(*name, "the element must be an integer");
      if (v.get<int64_t>() <= 0)
        bad_tensor(*name, fmt::format("must be at least 1, got {}", v.get<int64_t>()));
      max_tokens = v.get<int64_t>();
    } else if (*name == "sampling_parameters") {
      const Json& v = single(tensor_data(input, *name, {"BYTES"}), *name);
      if (!v.is_string()) bad_tensor(*name, "the element must be a JSON string");
      merge_sampling_fields(parse_json_object(v.get<std::string>(), "sampling_parameters"),
                            in.fields, "sampling_parameters.");
    } else if (*name == "stream") {
      const Json& v = single(tensor_data(input, *name, {"BOOL"}), *name);
      if (!v.is_boolean()) bad_tensor(*name, "the element must be a boolean");
      if (v.get<bool>())
        bad_tensor(*name, "streaming is not supported over REST; use gRPC ModelStreamInfer");
    } else {
      throw RequestError(400, *name, fmt::format("unknown input '{}'", *name));
    }
  }
  if (max_tokens) in.fields.max_tokens = max_tokens;
  if (in.text && !in.ids.empty())
    throw RequestError(400, "input_ids", "give either 'text_input' or 'input_ids', not both");
  if (!in.text && in.ids.empty())
    throw RequestError(400, "text_input", "the input 'text_input' (or 'input_ids') is required");
  if (const auto it = body.find("outputs"); it != body.end() && it->is_array()) {
    for (const Json& o : *it) {
      const auto n = o.is_object() ? get_string(o, "name", "outputs.") : std::nullopt;
      if (!n || (*n != "text_output" && *n != "output_ids"))
        throw RequestError(400, "outputs", "requested outputs must be text_output or output_ids");
      in.outputs.push_back(*n);
    }
  }
  return in;
}

}  // namespace sampan::server
