#include "server/kserve_decode.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cmath>
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
  // logit_bias and response_format, objects, can only travel as JSON strings in a protobuf
  // parameter. Parsed under the request depth limit; what is not a JSON object stays a string,
  // for the parser to report as the wrong type.
  for (const char* key : {"logit_bias", "response_format"}) {
    if (auto v = obj.find(key); v != obj.end() && v->is_string()) {
      try {
        *v = parse_json_object(v->get<std::string>(), key);
      } catch (const RequestError&) {
      }
    }
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

// ---- classic (tensor) models -----------------------------------------------------------------

std::optional<DType> kserve_dtype(std::string_view datatype) {
  if (datatype == "FP32") return DType::kF32;
  if (datatype == "FP16") return DType::kF16;
  if (datatype == "BF16") return DType::kBF16;
  if (datatype == "INT64") return DType::kI64;
  if (datatype == "INT32") return DType::kI32;
  if (datatype == "INT8") return DType::kI8;
  if (datatype == "UINT8") return DType::kU8;
  if (datatype == "BOOL") return DType::kBool;
  return std::nullopt;
}

const char* kserve_datatype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "FP32";
    case DType::kF16: return "FP16";
    case DType::kBF16: return "BF16";
    case DType::kI64: return "INT64";
    case DType::kI32: return "INT32";
    case DType::kI8: return "INT8";
    case DType::kU8: return "UINT8";
    case DType::kBool: return "BOOL";
    default: return nullptr;
  }
}

namespace {

constexpr const char* kTensorDatatypes = "FP32, INT64, INT32, INT8, UINT8, BOOL, FP16 or BF16";

DType tensor_dtype(const std::string& name, const std::string& datatype) {
  const std::optional<DType> dt = kserve_dtype(datatype);
  if (!dt) {
    bad_input(name, fmt::format("datatype '{}' is not supported (expected {})", datatype,
                                kTensorDatatypes));
  }
  return *dt;
}

// Elements of `shape`, refusing negative dimensions and more than kMaxElements.
int64_t shape_elements(const std::string& name, const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) bad_input(name, fmt::format("shape dimension {} is negative", d));
    if (d == 0) return 0;
  }
  for (int64_t d : shape) {
    if (n > kMaxElements / d) {
      bad_input(name, fmt::format("the shape {} holds more than {} elements", shape_str(shape),
                                  kMaxElements));
    }
    n *= d;
  }
  return n;
}

// Raw little-endian bytes into `t` (whose byte size the caller checked); BOOL bytes become 0/1.
void fill_raw(Tensor& t, std::string_view bytes) {
  if (!bytes.empty()) std::memcpy(t.raw(), bytes.data(), bytes.size());
  if (t.dtype() == DType::kBool) {
    auto* p = t.data<uint8_t>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] != 0;
  }
}

// One integer element of an INT* / UINT8 input, checked against [lo, hi].
int64_t integer_in(const std::string& name, const Json& v, int64_t lo, int64_t hi,
                   const std::string& datatype, size_t index) {
  bool ok = v.is_number_integer();
  int64_t x = 0;
  if (ok && v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    ok = u <= static_cast<uint64_t>(hi);
    x = ok ? static_cast<int64_t>(u) : 0;
  } else if (ok) {
    x = v.get<int64_t>();
    ok = x >= lo && x <= hi;
  }
  if (!ok) {
    bad_input(name, fmt::format("data[{}] = {} is not a {} value", index, v.dump(), datatype));
  }
  return x;
}

// JSON elements (row-major) into `t`.
void fill_json(Tensor& t, const std::string& name, const std::string& datatype,
               const std::vector<const Json*>& values) {
  const DType dt = t.dtype();
  for (size_t i = 0; i < values.size(); ++i) {
    const Json& v = *values[i];
    switch (dt) {
      case DType::kF32:
      {
        // Converting a double beyond float's range is undefined: refused instead.
        const double x = v.is_number() ? v.get<double>() : 0.0;
        if (!v.is_number() || std::abs(x) > std::numeric_limits<float>::max()) {
          bad_input(name, fmt::format("data[{}] = {} is not an FP32 number", i, v.dump()));
        }
        t.data<float>()[i] = static_cast<float>(x);
        break;
      }
      case DType::kI64:
        t.data<int64_t>()[i] = integer_in(name, v, std::numeric_limits<int64_t>::min(),
                                          std::numeric_limits<int64_t>::max(), datatype, i);
        break;
      case DType::kI32:
        t.data<int32_t>()[i] = static_cast<int32_t>(integer_in(
            name, v, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(),
            datatype, i));
        break;
      case DType::kI8:
        t.data<int8_t>()[i] = static_cast<int8_t>(integer_in(name, v, -128, 127, datatype, i));
        break;
      case DType::kU8:
        t.data<uint8_t>()[i] = static_cast<uint8_t>(integer_in(name, v, 0, 255, datatype, i));
        break;
      case DType::kBool:
        if (!v.is_boolean()) {
          bad_input(name, fmt::format("data[{}] = {} is not a boolean", i, v.dump()));
        }
        t.data<uint8_t>()[i] = v.get<bool>() ? 1 : 0;
        break;
      default:
        bad_input(name, fmt::format("datatype {} is accepted as binary data only", datatype));
    }
  }
}

}  // namespace

KserveTensorRequest parse_kserve_tensor_json(const Json& body, std::string_view binary) {
  KserveTensorRequest r;
  r.id = get_string(body, "id").value_or("");
  if (const auto it = body.find("parameters"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) throw RequestError("parameters", "'parameters' must be an object");
    r.binary_output = get_bool(*it, "binary_data_output", "parameters.").value_or(false);
  }
  const auto inputs = body.find("inputs");
  if (inputs == body.end() || !inputs->is_array() || inputs->empty())
    throw RequestError("inputs", "'inputs' must be a non-empty list of tensors");
  size_t offset = 0;  // binary bytes taken by the inputs so far
  std::set<std::string> seen;
  for (const Json& input : *inputs) {
    if (!input.is_object()) throw RequestError("inputs", "each input must be an object");
    const auto name_opt = get_string(input, "name", "inputs.");
    if (!name_opt) throw RequestError("inputs", "an input has no 'name'");
    const std::string& name = *name_opt;
    if (!seen.insert(name).second) bad_input(name, "given more than once");
    const auto datatype = get_string(input, "datatype", name + ".");
    if (!datatype) bad_input(name, "'datatype' is required");
    const DType dt = tensor_dtype(name, *datatype);
    const auto shape_it = input.find("shape");
    if (shape_it == input.end() || !shape_it->is_array())
      bad_input(name, "'shape' must be a list of dimensions");
    Shape shape;
    for (const Json& d : *shape_it) {
      if (!d.is_number_integer() || (d.is_number_unsigned() && d.get<uint64_t>() > uint64_t{1} << 40))
        bad_input(name, fmt::format("shape dimension {} is not a non-negative integer", d.dump()));
      shape.push_back(d.get<int64_t>());
    }
    const int64_t count = shape_elements(name, shape);
    std::optional<int64_t> binary_size;
    if (const auto p = input.find("parameters"); p != input.end() && !p->is_null()) {
      if (!p->is_object()) bad_input(name, "'parameters' must be an object");
      if (const auto b = p->find("binary_data_size"); b != p->end() && !b->is_null()) {
        if (!b->is_number_integer() || b->get<int64_t>() < 0)
          bad_input(name, fmt::format("parameters.binary_data_size {} is not a byte count",
                                      b->dump()));
        binary_size = b->get<int64_t>();
      }
    }
    Tensor value;  // allocated once the data is known to match the shape
    if (binary_size) {
      if (const auto d = input.find("data"); d != input.end() && !d->is_null())
        bad_input(name, "both 'data' and parameters.binary_data_size are given; send it one way");
      const int64_t want = dtype_storage_bytes(dt, count);
      if (*binary_size != want) {
        bad_input(name, fmt::format("binary_data_size is {} but the shape {} of {} needs {} bytes",
                                    *binary_size, shape_str(shape), *datatype, want));
      }
      if (static_cast<uint64_t>(*binary_size) > binary.size() - offset) {
        bad_input(name, fmt::format("binary_data_size {} runs past the end of the binary data "
                                    "({} bytes after the JSON header, {} taken by earlier inputs)",
                                    *binary_size, binary.size(), offset));
      }
      value = Tensor::empty(shape, dt);
      fill_raw(value, binary.substr(offset, static_cast<size_t>(*binary_size)));
      offset += static_cast<size_t>(*binary_size);
    } else {
      const auto d = input.find("data");
      if (d == input.end() || d->is_null())
        bad_input(name, "'data' (or parameters.binary_data_size) is required");
      std::vector<const Json*> values;
      flatten(*d, values);
      if (static_cast<int64_t>(values.size()) != count) {
        bad_input(name, fmt::format("the shape {} holds {} element{} but 'data' has {}",
                                    shape_str(shape), count, count == 1 ? "" : "s",
                                    values.size()));
      }
      value = Tensor::empty(shape, dt);
      fill_json(value, name, *datatype, values);
    }
    r.inputs.push_back({name, *datatype, std::move(value)});
  }
  if (offset != binary.size()) {
    throw RequestError("inputs", fmt::format("the body has {} bytes of binary data after the JSON "
                                             "header but the inputs' binary_data_size take {}",
                                             binary.size(), offset));
  }
  if (const auto it = body.find("outputs"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) throw RequestError("outputs", "'outputs' must be a list");
    for (const Json& o : *it) {
      const auto n = o.is_object() ? get_string(o, "name", "outputs.") : std::nullopt;
      if (!n) throw RequestError("outputs", "each requested output must be an object with a 'name'");
      KserveTensorRequest::Output out{*n, r.binary_output};
      if (const auto p = o.find("parameters"); p != o.end() && p->is_object()) {
        out.binary = get_bool(*p, "binary_data", "outputs.parameters.").value_or(r.binary_output);
      }
      r.outputs.push_back(std::move(out));
    }
  }
  return r;
}

KserveTensorRequest parse_kserve_tensor_proto(const inference::ModelInferRequest& req) {
  KserveTensorRequest r;
  r.id = req.id();
  if (req.inputs().empty()) throw RequestError("inputs", "inputs: at least one tensor is required");
  if (!req.raw_input_contents().empty() && req.raw_input_contents_size() != req.inputs_size()) {
    throw RequestError("raw_input_contents",
                       fmt::format("raw_input_contents: {} entries for {} inputs",
                                   req.raw_input_contents_size(), req.inputs_size()));
  }
  std::set<std::string_view> seen;
  for (int i = 0; i < req.inputs_size(); ++i) {
    const InputTensor& t = req.inputs(i);
    const std::string& name = t.name();
    if (!seen.insert(name).second) bad_input(name, "given more than once");
    const DType dt = tensor_dtype(name, t.datatype());
    const Input in{&t, req.raw_input_contents().empty() ? nullptr : &req.raw_input_contents(i),
                   element_count(t)};
    const Shape shape(t.shape().begin(), t.shape().end());
    Tensor value;  // allocated once the contents are known to match the shape
    if (in.raw) {
      expect_contents_in(in, "raw_input_contents");  // any typed contents besides raw: refused
      expect_raw_size(in, static_cast<size_t>(dtype_storage_bytes(dt, 1)));
      value = Tensor::empty(shape, dt);
      fill_raw(value, *in.raw);
    } else {
      const pb::InferTensorContents& c = t.contents();
      auto range = [&](int64_t v, int64_t lo, int64_t hi, int64_t index) {
        if (v < lo || v > hi) {
          bad_input(name, fmt::format("element {} = {} is not a {} value", index, v, t.datatype()));
        }
        return v;
      };
      // The one typed field of the datatype, checked before anything is allocated.
      const char* field = nullptr;
      int got = 0;
      switch (dt) {
        case DType::kF32: field = "fp32_contents"; got = c.fp32_contents_size(); break;
        case DType::kI64: field = "int64_contents"; got = c.int64_contents_size(); break;
        case DType::kI32:
        case DType::kI8: field = "int_contents"; got = c.int_contents_size(); break;
        case DType::kU8: field = "uint_contents"; got = c.uint_contents_size(); break;
        case DType::kBool: field = "bool_contents"; got = c.bool_contents_size(); break;
        default:
          bad_input(name, fmt::format("datatype {} is accepted as raw_input_contents only",
                                      t.datatype()));
      }
      expect_contents_in(in, field);
      expect_count(in, static_cast<size_t>(got));
      value = Tensor::empty(shape, dt);
      for (int k = 0; k < got; ++k) {
        switch (dt) {
          case DType::kF32: value.data<float>()[k] = c.fp32_contents(k); break;
          case DType::kI64: value.data<int64_t>()[k] = c.int64_contents(k); break;
          case DType::kI32: value.data<int32_t>()[k] = c.int_contents(k); break;
          case DType::kI8:
            value.data<int8_t>()[k] = static_cast<int8_t>(range(c.int_contents(k), -128, 127, k));
            break;
          case DType::kU8:
            value.data<uint8_t>()[k] = static_cast<uint8_t>(range(c.uint_contents(k), 0, 255, k));
            break;
          default: value.data<uint8_t>()[k] = c.bool_contents(k) ? 1 : 0; break;
        }
      }
    }
    r.inputs.push_back({name, t.datatype(), std::move(value)});
  }
  for (const auto& o : req.outputs()) r.outputs.push_back({o.name(), true});
  return r;
}

}  // namespace sampan::server
