#include "server/kserve_decode.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <set>
#include <string_view>

#include "proto/grpc_service.pb.h"

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
  throw RequestError(name, fmt::format("input '{}': {}", name, what));
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
    if (!it->is_object()) throw RequestError("parameters", "'parameters' must be an object");
    merge_sampling_fields(*it, in.fields, "parameters.");
    if (get_bool(*it, "stream", "parameters.").value_or(false))
      throw RequestError("parameters.stream",
                         "'parameters.stream' is not supported over REST; use gRPC "
                         "ModelStreamInfer or /v1/completions");
  }
  const auto inputs = body.find("inputs");
  if (inputs == body.end() || !inputs->is_array() || inputs->empty())
    throw RequestError("inputs", "'inputs' must be a non-empty list of tensors");
  std::optional<int64_t> max_tokens;
  std::vector<std::string> seen;  // input names, each allowed once
  for (const Json& input : *inputs) {
    if (!input.is_object()) throw RequestError("inputs", "each input must be an object");
    const auto name = get_string(input, "name", "inputs.");
    if (!name) throw RequestError("inputs", "an input has no 'name'");
    if (std::find(seen.begin(), seen.end(), *name) != seen.end())
      throw RequestError(*name, fmt::format("input '{}' is given twice", *name));
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
      throw RequestError(*name, fmt::format("unknown input '{}'", *name));
    }
  }
  if (max_tokens) in.fields.max_tokens = max_tokens;
  if (in.text && !in.ids.empty())
    throw RequestError("input_ids", "give either 'text_input' or 'input_ids', not both");
  if (!in.text && in.ids.empty())
    throw RequestError("text_input", "the input 'text_input' (or 'input_ids') is required");
  if (const auto it = body.find("outputs"); it != body.end() && it->is_array()) {
    for (const Json& o : *it) {
      const auto n = o.is_object() ? get_string(o, "name", "outputs.") : std::nullopt;
      if (!n || (*n != "text_output" && *n != "output_ids"))
        throw RequestError("outputs", "requested outputs must be text_output or output_ids");
      in.outputs.push_back(*n);
    }
  }
  return in;
}

// ---- gRPC: inference.ModelInferRequest ------------------------------------------------------

namespace {

namespace pb = ::inference;
using InputTensor = pb::ModelInferRequest::InferInputTensor;
using ParamMap = google::protobuf::Map<std::string, pb::InferParameter>;

static_assert(std::endian::native == std::endian::little,
              "raw tensor contents are little-endian; a big-endian host needs byte swaps");

[[noreturn]] void bad_input(const std::string& name, const std::string& what) {
  throw RequestError(name, fmt::format("input '{}': {}", name, what));
}

// ---- reading input tensors ---------------------------------------------------------------

// One input with its raw bytes when the request used raw_input_contents.
struct Input {
  const InputTensor* tensor;
  const std::string* raw;  // null: typed contents
  int64_t count;           // elements, from the shape
};

// The most elements one input may declare. Far above any prompt (and above what fits in a
// request message), and small enough that count * 8 bytes cannot overflow.
constexpr int64_t kMaxElements = std::numeric_limits<int32_t>::max();

std::string shape_text(const InputTensor& t) {
  return fmt::format("[{}]", fmt::join(t.shape(), ", "));
}

int64_t element_count(const InputTensor& t) {
  if (t.shape().empty()) {
    bad_input(t.name(), "the shape is empty (a one-element input has shape [1])");
  }
  bool zero = false;
  for (int64_t d : t.shape()) {
    if (d < 0) bad_input(t.name(), fmt::format("shape dimension {} is negative", d));
    zero |= d == 0;
  }
  if (zero) return 0;  // whatever the other dimensions are
  int64_t n = 1;
  for (int64_t d : t.shape()) {
    // n * d > kMaxElements, tested without overflowing.
    if (n > kMaxElements / d) {
      bad_input(t.name(), fmt::format("the shape {} holds more than {} elements", shape_text(t),
                                      kMaxElements));
    }
    n *= d;
  }
  return n;
}

void expect_datatype(const Input& in, std::initializer_list<const char*> allowed) {
  for (const char* dt : allowed) {
    if (in.tensor->datatype() == dt) return;
  }
  bad_input(in.tensor->name(), fmt::format("datatype must be {}, got '{}'",
                                           fmt::join(allowed, " or "), in.tensor->datatype()));
}

// Contents come one way only: raw_input_contents, or the one typed field that holds the
// datatype (`field`, e.g. "int_contents" for INT32). Anything else would be silently ignored.
void expect_contents_in(const Input& in, const char* field) {
  const pb::InferTensorContents& c = in.tensor->contents();
  const std::pair<const char*, int> sizes[] = {
      {"bool_contents", c.bool_contents_size()},     {"int_contents", c.int_contents_size()},
      {"int64_contents", c.int64_contents_size()},   {"uint_contents", c.uint_contents_size()},
      {"uint64_contents", c.uint64_contents_size()}, {"fp32_contents", c.fp32_contents_size()},
      {"fp64_contents", c.fp64_contents_size()},     {"bytes_contents", c.bytes_contents_size()}};
  for (const auto& [name, size] : sizes) {
    if (size == 0) continue;
    if (in.raw) {
      bad_input(in.tensor->name(), fmt::format("contents.{} given together with "
                                               "raw_input_contents; send the input one way",
                                               name));
    }
    if (std::strcmp(name, field) != 0) {
      bad_input(in.tensor->name(), fmt::format("datatype {} takes its values in contents.{}, "
                                               "got contents.{}", in.tensor->datatype(), field,
                                               name));
    }
  }
}

void expect_count(const Input& in, size_t got) {
  if (static_cast<int64_t>(got) != in.count) {
    bad_input(in.tensor->name(), fmt::format("the shape {} holds {} element{} but {} were sent",
                                             shape_text(*in.tensor), in.count,
                                             in.count == 1 ? "" : "s", got));
  }
}

// Fixed-size raw elements: the byte count must be exactly shape elements times their size.
void expect_raw_size(const Input& in, size_t element_size) {
  const auto want = static_cast<uint64_t>(in.count) * element_size;  // <= 2^31 * 8
  if (in.raw->size() != want) {
    bad_input(in.tensor->name(),
              fmt::format("raw_input_contents has {} bytes; the shape {} of {} needs {} ({} "
                          "element{} of {} byte{})", in.raw->size(), shape_text(*in.tensor),
                          in.tensor->datatype(), want, in.count, in.count == 1 ? "" : "s",
                          element_size, element_size == 1 ? "" : "s"));
  }
}

std::vector<std::string> read_bytes(const Input& in) {
  expect_datatype(in, {"BYTES"});
  expect_contents_in(in, "bytes_contents");
  std::vector<std::string> out;
  if (in.raw) {
    // Each element: a 4-byte little-endian length, then that many bytes. Reading stops at the
    // first element past the shape, so a stream of empty elements cannot allocate more than
    // the shape declares.
    const std::string& raw = *in.raw;
    size_t pos = 0;
    while (pos < raw.size()) {
      if (static_cast<int64_t>(out.size()) >= in.count) {
        bad_input(in.tensor->name(), fmt::format("raw_input_contents holds more than the {} "
                                                 "BYTES element{} of the shape {}", in.count,
                                                 in.count == 1 ? "" : "s",
                                                 shape_text(*in.tensor)));
      }
      if (raw.size() - pos < 4) {
        bad_input(in.tensor->name(),
                  fmt::format("raw_input_contents: BYTES element {} has a truncated length "
                              "prefix ({} of 4 bytes at offset {})", out.size(), raw.size() - pos,
                              pos));
      }
      uint32_t len = 0;
      std::memcpy(&len, raw.data() + pos, 4);
      pos += 4;
      if (raw.size() - pos < len) {
        bad_input(in.tensor->name(),
                  fmt::format("raw_input_contents: BYTES element {} declares {} bytes but only "
                              "{} remain", out.size(), len, raw.size() - pos));
      }
      out.emplace_back(raw, pos, len);
      pos += len;
    }
  } else {
    out.assign(in.tensor->contents().bytes_contents().begin(),
               in.tensor->contents().bytes_contents().end());
  }
  expect_count(in, out.size());
  return out;
}

std::vector<int64_t> read_ints(const Input& in) {
  expect_datatype(in, {"INT32", "INT64"});
  const bool wide = in.tensor->datatype() == "INT64";
  expect_contents_in(in, wide ? "int64_contents" : "int_contents");
  std::vector<int64_t> out;
  if (in.raw) {
    const size_t size = wide ? 8 : 4;
    expect_raw_size(in, size);
    out.reserve(static_cast<size_t>(in.count));
    for (size_t pos = 0; pos < in.raw->size(); pos += size) {
      if (wide) {
        int64_t v = 0;
        std::memcpy(&v, in.raw->data() + pos, 8);
        out.push_back(v);
      } else {
        int32_t v = 0;
        std::memcpy(&v, in.raw->data() + pos, 4);
        out.push_back(v);
      }
    }
  } else if (wide) {
    expect_count(in, in.tensor->contents().int64_contents_size());
    out.assign(in.tensor->contents().int64_contents().begin(),
               in.tensor->contents().int64_contents().end());
  } else {
    expect_count(in, in.tensor->contents().int_contents_size());
    out.assign(in.tensor->contents().int_contents().begin(),
               in.tensor->contents().int_contents().end());
  }
  return out;
}

std::vector<bool> read_bools(const Input& in) {
  expect_datatype(in, {"BOOL"});
  expect_contents_in(in, "bool_contents");
  std::vector<bool> out;
  if (in.raw) {
    expect_raw_size(in, 1);  // one byte per element
    for (char c : *in.raw) out.push_back(c != 0);
  } else {
    expect_count(in, in.tensor->contents().bool_contents_size());
    out.assign(in.tensor->contents().bool_contents().begin(),
               in.tensor->contents().bool_contents().end());
  }
  return out;
}

template <typename T>
T single(const std::vector<T>& values, const std::string& name) {
  if (values.size() != 1) {
    bad_input(name, fmt::format("expected one element (shape [1]), got {}", values.size()));
  }
  return values[0];
}

// ---- request parameters ----------------------------------------------------------------

Json params_to_json(const ParamMap& params) {
  Json out = Json::object();
  for (const auto& [key, p] : params) {
    switch (p.parameter_choice_case()) {
      case pb::InferParameter::kBoolParam: out[key] = p.bool_param(); break;
      case pb::InferParameter::kInt64Param: out[key] = p.int64_param(); break;
      case pb::InferParameter::kStringParam: out[key] = p.string_param(); break;
      case pb::InferParameter::kDoubleParam: out[key] = p.double_param(); break;
      case pb::InferParameter::kUint64Param: out[key] = p.uint64_param(); break;
      case pb::InferParameter::PARAMETER_CHOICE_NOT_SET: break;
    }
  }
  return out;
}

// Triton's vLLM backend documents sampling_parameters with values as strings
// ({"temperature": "0.1"}), and its clients send them so: numbers and booleans given as strings
// are converted here, before the shared (strictly typed) parser sees them.
void coerce_string_values(Json& obj) {
  static constexpr const char* kNumeric[] = {
      "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
      "repetition_penalty", "seed", "max_tokens"};
  for (const char* key : kNumeric) {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_string()) continue;
    const std::string s = it->get<std::string>();
    Json parsed = Json::parse(s, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_number()) *it = parsed;  // else the parser reports the wrong type
  }
  auto it = obj.find("ignore_eos");
  if (it != obj.end() && it->is_string()) {
    if (*it == "true" || *it == "True") *it = true;
    else if (*it == "false" || *it == "False") *it = false;
  }
}

}  // namespace

KserveInferRequest parse_kserve_proto(const inference::ModelInferRequest& req) {
  KserveInferRequest spec;
  spec.id = req.id();
  if (!req.parameters().empty()) {
    Json params = params_to_json(req.parameters());
    coerce_string_values(params);
    merge_sampling_fields(params, spec.fields, "parameters.");
  }
  if (req.inputs().empty()) {
    throw RequestError("inputs", "inputs: at least the 'text_input' tensor is required");
  }
  if (!req.raw_input_contents().empty() && req.raw_input_contents_size() != req.inputs_size()) {
    throw RequestError("raw_input_contents",
                       fmt::format("raw_input_contents: {} entries for {} inputs",
                                   req.raw_input_contents_size(), req.inputs_size()));
  }
  std::optional<int64_t> max_tokens;
  std::set<std::string_view> seen;
  for (int i = 0; i < req.inputs_size(); ++i) {
    const InputTensor& t = req.inputs(i);
    const std::string& name = t.name();
    // A second copy would silently override (or, for sampling_parameters, merge into) the first.
    if (!seen.insert(name).second) bad_input(name, "given more than once");
    const Input in{&t, req.raw_input_contents().empty() ? nullptr : &req.raw_input_contents(i),
                   element_count(t)};
    if (name == "text_input") {
      spec.text = single(read_bytes(in), name);
      if (spec.text->empty()) bad_input(name, "the text is empty");
    } else if (name == "input_ids") {
      for (int64_t v : read_ints(in)) {
        if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
          bad_input(name, fmt::format("{} is not a token id", v));
        }
        spec.ids.push_back(static_cast<int32_t>(v));
      }
      if (spec.ids.empty()) bad_input(name, "no token ids");
    } else if (name == "max_tokens") {
      int64_t v = single(read_ints(in), name);
      if (v < 1) bad_input(name, fmt::format("must be at least 1, got {}", v));
      max_tokens = v;
    } else if (name == "stream") {
      spec.stream = single(read_bools(in), name);
    } else if (name == "sampling_parameters") {
      Json obj;
      try {
        obj = parse_json_object(single(read_bytes(in), name), "sampling_parameters");
      } catch (const RequestError& e) {
        bad_input(name, e.what());  // the shared parser's syntax errors name no field
      }
      coerce_string_values(obj);
      merge_sampling_fields(obj, spec.fields, "sampling_parameters.");
    } else {
      throw RequestError(name,
                         fmt::format("unknown input '{}' (expected text_input, input_ids, "
                                     "max_tokens, stream, sampling_parameters)", name));
    }
  }
  if (max_tokens) spec.fields.max_tokens = max_tokens;
  if (spec.text && !spec.ids.empty()) {
    throw RequestError("input_ids", "give either 'text_input' or 'input_ids', not both");
  }
  if (!spec.text && spec.ids.empty()) {
    throw RequestError("text_input", "the input 'text_input' (or 'input_ids') is required");
  }
  for (const auto& o : req.outputs()) {
    if (o.name() != "text_output" && o.name() != "output_ids") {
      throw RequestError("outputs", fmt::format("outputs: unknown output '{}' (expected "
                                                     "text_output or output_ids)", o.name()));
    }
    spec.outputs.push_back(o.name());
  }
  return spec;
}

}  // namespace sampan::server
