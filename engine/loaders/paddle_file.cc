// Paddle model files: locating the program and params, the *.pdiparams reader, the *.pdmodel
// parser. See paddle_file.h for the params layout.
#include "engine/loaders/paddle_file.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.h"
#include "proto/formats/paddle_framework.pb.h"

namespace sampan::paddle {
namespace fs = std::filesystem;
namespace pb = paddle_format;

std::string read_file_bytes(const std::string& path, const char* what) {
  std::error_code ec;
  SAMPAN_CHECK(fs::is_regular_file(path, ec), ErrorCode::kNotFound, "{}: {} not found", path, what);
  std::ifstream in(path, std::ios::binary);
  SAMPAN_CHECK(in.good(), ErrorCode::kIo, "{}: cannot open the {}", path, what);
  std::ostringstream ss;
  ss << in.rdbuf();
  SAMPAN_CHECK(!in.bad(), ErrorCode::kIo, "{}: reading the {} failed", path, what);
  return ss.str();
}

std::optional<PaddlePaths> paddle_paths(const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  auto params_for = [](const fs::path& program) {
    fs::path q = program;
    return q.replace_extension(".pdiparams").string();
  };
  const std::string ext = p.extension().string();
  if (ext == ".pdmodel") return PaddlePaths{path, params_for(p), false};
  if (ext == ".pdiparams") {
    // The params file given: the program next to it.
    fs::path j = p, m = p;
    j.replace_extension(".json");
    m.replace_extension(".pdmodel");
    if (fs::exists(j, ec)) return PaddlePaths{j.string(), path, true};
    if (fs::exists(m, ec)) return PaddlePaths{m.string(), path, false};
    return std::nullopt;
  }
  if (ext == ".json") {
    // A PIR program: a json file with a .pdiparams beside it (config.json and other json files
    // are not claimed).
    if (p.filename() == "config.json") return std::nullopt;
    if (fs::exists(params_for(p), ec)) return PaddlePaths{path, params_for(p), true};
    // Without its params: claimed when it opens like a PIR program (then the missing params file
    // is the error).
    std::ifstream in(path, std::ios::binary);
    std::string head(256, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
    if (head.find("\"base_code\"") == std::string::npos) return std::nullopt;
    return PaddlePaths{path, params_for(p), true};
  }
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "config.json", ec)) return std::nullopt;  // a Hugging Face directory
    std::vector<fs::path> params;
    for (const auto& e : fs::directory_iterator(p, ec)) {
      if (e.path().extension() == ".pdiparams") params.push_back(e.path());
    }
    std::vector<fs::path> programs;
    for (const auto& e : fs::directory_iterator(p, ec)) {
      if (e.path().extension() == ".pdmodel") programs.push_back(e.path());
      if (e.path().extension() == ".json" && fs::exists(params_for(e.path()), ec)) programs.push_back(e.path());
    }
    if (programs.empty()) {
      if (params.empty()) return std::nullopt;
      // A params file alone: its program is missing.
      fs::path j = params[0];
      return PaddlePaths{j.replace_extension(".json").string(), params[0].string(), true};
    }
    std::sort(programs.begin(), programs.end());
    SAMPAN_CHECK(programs.size() == 1, ErrorCode::kInvalidArgument,
                 "{}: holds {} Paddle programs ({}, ...); pass the one to load", path, programs.size(),
                 programs[0].filename().string());
    const bool pir = programs[0].extension() == ".json";
    return PaddlePaths{programs[0].string(), params_for(programs[0]), pir};
  }
  // A prefix: prefix.json / prefix.pdmodel with prefix.pdiparams.
  const fs::path json = path + ".json", pdmodel = path + ".pdmodel", params = path + ".pdiparams";
  if (fs::exists(json, ec)) return PaddlePaths{json.string(), params.string(), true};
  if (fs::exists(pdmodel, ec)) return PaddlePaths{pdmodel.string(), params.string(), false};
  if (fs::exists(params, ec)) return PaddlePaths{json.string(), params.string(), true};
  return std::nullopt;
}

DType paddle_dtype(int32_t t, const std::string& what) {
  switch (t) {
    case pb::VarType::FP32:
    case pb::VarType::FP64: return DType::kF32;
    case pb::VarType::INT32: return DType::kI32;
    case pb::VarType::INT64: return DType::kI64;
    case pb::VarType::BOOL: return DType::kBool;
    case pb::VarType::UINT8: return DType::kU8;
    case pb::VarType::INT8: return DType::kI8;
    default: break;
  }
  const std::string name = pb::VarType::Type_IsValid(t) ? pb::VarType::Type_Name(static_cast<pb::VarType::Type>(t))
                                                        : std::to_string(t);
  fail(ErrorCode::kUnsupported, "{}: data type {} is not supported", what, name);
}

DType paddle_dtype_name(const std::string& name, const std::string& what) {
  if (name == "float32" || name == "float64") return DType::kF32;
  if (name == "int32") return DType::kI32;
  if (name == "int64") return DType::kI64;
  if (name == "bool") return DType::kBool;
  if (name == "uint8") return DType::kU8;
  if (name == "int8") return DType::kI8;
  fail(ErrorCode::kUnsupported, "{}: data type '{}' is not supported", what, name);
}

namespace {

struct Cursor {
  const std::string& path;
  const std::string& bytes;
  size_t pos = 0;
  std::string param;  // being read, for messages
  size_t index = 0, count = 0;

  const char* take(size_t n, const char* what) {
    SAMPAN_CHECK(n <= bytes.size() && pos <= bytes.size() - n, ErrorCode::kInvalidModel,
                 "{}: ends inside parameter '{}' ({} of {}, its {}): needs {} bytes at offset {}, the file has {} "
                 "(shorter than the program declares)",
                 path, param, index + 1, count, what, n, pos, bytes.size());
    const char* p = bytes.data() + pos;
    pos += n;
    return p;
  }
  template <typename T>
  T get(const char* what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }
};

}  // namespace

std::map<std::string, Tensor> read_pdiparams(const std::string& path, std::vector<ParamSpec> params) {
  return parse_pdiparams(read_file_bytes(path, "parameters file"), path, std::move(params));
}

std::map<std::string, Tensor> parse_pdiparams(const std::string& bytes, const std::string& path,
                                              std::vector<ParamSpec> params) {
  std::sort(params.begin(), params.end(), [](const ParamSpec& a, const ParamSpec& b) { return a.name < b.name; });
  Cursor c{path, bytes, 0, {}, 0, params.size()};
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSpec& spec = params[i];
    c.param = spec.name;
    c.index = i;
    const uint32_t version = c.get<uint32_t>("version");
    SAMPAN_CHECK(version == 0, ErrorCode::kInvalidModel, "{}: parameter '{}': tensor version {} (expected 0)",
                 path, spec.name, version);
    const uint64_t lod_levels = c.get<uint64_t>("lod level");
    SAMPAN_CHECK(lod_levels < 64, ErrorCode::kInvalidModel, "{}: parameter '{}': lod level {}", path, spec.name, lod_levels);
    for (uint64_t l = 0; l < lod_levels; ++l) {
      const uint64_t n = c.get<uint64_t>("lod size");
      c.take(static_cast<size_t>(std::min<uint64_t>(n, bytes.size() + 1)), "lod data");
    }
    const uint32_t tversion = c.get<uint32_t>("tensor version");
    SAMPAN_CHECK(tversion == 0, ErrorCode::kInvalidModel, "{}: parameter '{}': tensor version {} (expected 0)",
                 path, spec.name, tversion);
    const int32_t desc_size = c.get<int32_t>("description size");
    SAMPAN_CHECK(desc_size >= 0, ErrorCode::kInvalidModel, "{}: parameter '{}': description size {}", path,
                 spec.name, desc_size);
    const char* desc_bytes = c.take(static_cast<size_t>(desc_size), "description");
    pb::VarType::TensorDesc desc;
    SAMPAN_CHECK(desc.ParseFromArray(desc_bytes, desc_size), ErrorCode::kInvalidModel,
                 "{}: parameter '{}': the tensor description is not a TensorDesc", path, spec.name);
    const std::string what = fmt::format("{}: parameter '{}'", path, spec.name);
    const DType dtype = paddle_dtype(desc.data_type(), what);
    Shape shape;
    int64_t numel = 1;
    for (int64_t d : desc.dims()) {
      SAMPAN_CHECK(d >= 0 && d < (int64_t{1} << 40) && (d == 0 || numel <= (int64_t{1} << 40) / d),
                   ErrorCode::kInvalidModel, "{}: dims {} are out of range", what, fmt::join(desc.dims(), ", "));
      shape.push_back(d);
      numel *= d;
    }
    if (!spec.dims.empty()) {
      bool same = spec.dims.size() == shape.size();
      for (size_t d = 0; same && d < shape.size(); ++d) same = spec.dims[d] < 0 || spec.dims[d] == shape[d];
      SAMPAN_CHECK(same, ErrorCode::kInvalidModel, "{}: holds dims [{}], the program declares [{}]", what,
                   fmt::join(shape, ", "), fmt::join(spec.dims, ", "));
    }
    const bool f64 = desc.data_type() == pb::VarType::FP64;
    const size_t elem = f64 ? 8 : static_cast<size_t>(dtype_storage_bytes(dtype, 1));
    const char* data = c.take(static_cast<size_t>(numel) * elem, "data");
    Tensor t = Tensor::empty(shape, dtype);
    if (f64) {
      for (int64_t k = 0; k < numel; ++k) {
        double v;
        std::memcpy(&v, data + k * 8, 8);
        t.data<float>()[k] = static_cast<float>(v);
      }
    } else if (numel > 0) {
      std::memcpy(t.data<uint8_t>(), data, static_cast<size_t>(numel) * elem);
    }
    out[spec.name] = std::move(t);
  }
  SAMPAN_CHECK(c.pos == bytes.size(), ErrorCode::kInvalidModel,
               "{}: {} bytes are left after the {} parameters the program declares", path, bytes.size() - c.pos,
               params.size());
  return out;
}

std::shared_ptr<const pb::ProgramDesc> read_pdmodel(const std::string& path) {
  return parse_pdmodel(read_file_bytes(path, "program"), path);
}

std::shared_ptr<const pb::ProgramDesc> parse_pdmodel(const std::string& bytes, const std::string& path) {
  auto prog = std::make_shared<pb::ProgramDesc>();
  SAMPAN_CHECK(prog->ParseFromString(bytes), ErrorCode::kInvalidModel,
               "{}: is not a Paddle ProgramDesc (truncated or not a .pdmodel file)", path);
  SAMPAN_CHECK(prog->blocks_size() > 0, ErrorCode::kInvalidModel, "{}: the program has no blocks", path);
  return prog;
}

}  // namespace sampan::paddle

namespace sampan::paddle {

std::vector<ParamSpec> pdmodel_params(const pb::ProgramDesc& prog, const std::string& path) {
  SAMPAN_CHECK(prog.blocks_size() > 0, ErrorCode::kInvalidModel, "{}: the program has no blocks", path);
  std::vector<ParamSpec> specs;
  for (const pb::VarDesc& v : prog.blocks(0).vars()) {
    if (!v.persistable()) continue;
    const int32_t t = v.type().type();
    if (t == pb::VarType::FEED_MINIBATCH || t == pb::VarType::FETCH_LIST || t == pb::VarType::RAW) continue;
    SAMPAN_CHECK(t == pb::VarType::DENSE_TENSOR && v.type().has_dense_tensor(), ErrorCode::kUnsupported,
                 "{}: persistable variable '{}' is not a dense tensor", path, v.name());
    const auto& td = v.type().dense_tensor().tensor();
    ParamSpec s;
    s.name = v.name();
    s.dtype = paddle_dtype(td.data_type(), fmt::format("{}: variable '{}'", path, v.name()));
    s.dims.assign(td.dims().begin(), td.dims().end());
    specs.push_back(std::move(s));
  }
  return specs;
}

}  // namespace sampan::paddle
