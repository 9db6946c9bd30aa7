#include "engine/loaders/weight_store.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/loaders/json_util.h"

namespace sampan {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";
constexpr int kMaxIndexDepth = 16;

bool file_exists(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// A shard name must stay inside the model directory: the index is input, and "../x" or an
// absolute path would let it read any file the process can.
bool shard_name_ok(const std::string& shard) {
  if (shard.empty()) return false;
  const fs::path p(shard);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory()) return false;
  for (const auto& part : p) {
    if (part == "..") return false;
  }
  return true;
}

std::string dtype_list(const std::vector<DType>& allowed) {
  std::string s = allowed.size() > 1 ? "one of " : "";
  for (size_t i = 0; i < allowed.size(); ++i) {
    if (i) s += ", ";
    s += dtype_name(allowed[i]);
  }
  return s;
}

}  // namespace

WeightStore WeightStore::open(const std::string& dir) {
  WeightStore store;
  store.dir_ = dir;
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  SAMPAN_CHECK(fs::exists(st), ErrorCode::kNotFound, "{}: model directory does not exist", dir);
  if (fs::is_regular_file(st)) {
    // A single .safetensors file given directly is a one-file model.
    store.add_file(SafetensorsFile::open(dir));
    return store;
  }
  SAMPAN_CHECK(fs::is_directory(st), ErrorCode::kInvalidArgument,
               "{}: not a directory or a safetensors file", dir);

  const fs::path root(dir);
  if (file_exists(root / kIndexName)) {
    store.open_indexed((root / kIndexName).string());
  } else if (file_exists(root / kSingleName)) {
    store.add_file(SafetensorsFile::open((root / kSingleName).string()));
  } else {
    std::vector<std::string> shards;
    for (const auto& entry : fs::directory_iterator(root, ec)) {
      if (entry.path().extension() == ".safetensors" && file_exists(entry.path())) {
        shards.push_back(entry.path().string());
      }
    }
    SAMPAN_CHECK(!ec, ErrorCode::kIo, "{}: cannot list the directory: {}", dir, ec.message());
    SAMPAN_CHECK(!shards.empty(), ErrorCode::kNotFound,
                 "{}: no {}, {} or *.safetensors file in the directory", dir, kIndexName,
                 kSingleName);
    std::sort(shards.begin(), shards.end());
    for (const auto& shard : shards) store.add_file(SafetensorsFile::open(shard));
  }
  log::debug("{}: {} tensors in {} file(s)", dir, store.size(), store.files_.size());
  return store;
}

void WeightStore::open_indexed(const std::string& index_path) {
  const auto mapped = MappedFile::open(index_path);
  const std::string_view text(reinterpret_cast<const char*>(mapped->data()), mapped->size());
  const json index = parse_json_strict(text, index_path, "index", kMaxIndexDepth);
  SAMPAN_CHECK(index.is_object(), ErrorCode::kInvalidModel, "{}: index is not a JSON object",
               index_path);
  if (const auto it = index.find("metadata"); it != index.end() && !it->is_null()) {
    SAMPAN_CHECK(it->is_object(), ErrorCode::kInvalidModel,
                 "{}: 'metadata' must be an object", index_path);
    index_metadata_ = it->dump();
  }
  const auto wm = index.find("weight_map");
  SAMPAN_CHECK(wm != index.end(), ErrorCode::kInvalidModel, "{}: 'weight_map' is missing",
               index_path);
  SAMPAN_CHECK(wm->is_object(), ErrorCode::kInvalidModel, "{}: 'weight_map' must be an object",
               index_path);

  // Shard -> the tensors the index puts there; std::map opens shards in a stable order.
  std::map<std::string, std::vector<std::string>> by_shard;
  for (const auto& [tensor, shard] : wm->items()) {
    SAMPAN_CHECK(shard.is_string(), ErrorCode::kInvalidModel,
                 "{}: weight_map entry for tensor '{}' must be a file name string", index_path,
                 printable(tensor));
    const auto& name = shard.get_ref<const std::string&>();
    SAMPAN_CHECK(shard_name_ok(name), ErrorCode::kInvalidModel,
                 "{}: tensor '{}' maps to shard '{}', which is not a file inside the model "
                 "directory",
                 index_path, printable(tensor), printable(name));
    by_shard[fs::path(name).lexically_normal().string()].push_back(tensor);
  }
  SAMPAN_CHECK(!by_shard.empty(), ErrorCode::kInvalidModel, "{}: 'weight_map' is empty",
               index_path);

  const fs::path root(dir_);
  for (const auto& [shard, tensors] : by_shard) {
    const fs::path shard_path = root / shard;
    SAMPAN_CHECK(file_exists(shard_path), ErrorCode::kNotFound,
                 "{}: shard '{}' (holding tensor '{}') does not exist", index_path,
                 printable(shard), printable(tensors.front()));
    SafetensorsFile file = SafetensorsFile::open(shard_path.string());
    for (const auto& t : tensors) {
      SAMPAN_CHECK(file.has(t), ErrorCode::kInvalidModel,
                   "{}: tensor '{}' is mapped to shard '{}', which does not contain it",
                   index_path, printable(t), printable(shard));
    }
    add_file(std::move(file));
  }
}

void WeightStore::add_file(SafetensorsFile file) {
  const size_t id = files_.size();
  for (const auto& name : file.names()) {
    const auto [it, inserted] = where_.emplace(name, id);
    SAMPAN_CHECK(inserted, ErrorCode::kInvalidModel, "{}: tensor '{}' is also in {}", file.path(),
                 printable(name), files_[it->second].path());
  }
  files_.push_back(std::move(file));
}

std::vector<std::string> WeightStore::files() const {
  std::vector<std::string> out;
  out.reserve(files_.size());
  for (const auto& f : files_) out.push_back(f.path());
  return out;
}

bool WeightStore::has(std::string_view name) const {
  return where_.find(std::string(name)) != where_.end();
}

const SafetensorsFile& WeightStore::file_of(std::string_view name) const {
  const auto it = where_.find(std::string(name));
  SAMPAN_CHECK(it != where_.end(), ErrorCode::kNotFound, "{}: tensor '{}' is missing", dir_,
               printable(name));
  return files_[it->second];
}

WeightInfo WeightStore::info(std::string_view name) const {
  const SafetensorsFile& file = file_of(name);
  const SafetensorsTensorInfo& t = file.info(name);
  return WeightInfo{t.name, file.path(), t.dtype, t.shape, t.nbytes()};
}

Tensor WeightStore::get(std::string_view name) const { return file_of(name).get(name); }

Tensor WeightStore::get_as(std::string_view name, const Shape& expected,
                           const std::vector<DType>& allowed) const {
  const SafetensorsFile& file = file_of(name);
  const SafetensorsTensorInfo& t = file.info(name);
  bool shape_ok = t.shape.size() == expected.size();
  for (size_t i = 0; shape_ok && i < expected.size(); ++i) {
    shape_ok = expected[i] == -1 || expected[i] == t.shape[i];
  }
  SAMPAN_CHECK(shape_ok, ErrorCode::kInvalidModel, "{}: tensor '{}' has shape {}, expected {}",
               file.path(), printable(name), shape_str(t.shape), shape_str(expected));
  const bool dtype_ok =
      allowed.empty() || std::find(allowed.begin(), allowed.end(), t.dtype) != allowed.end();
  SAMPAN_CHECK(dtype_ok, ErrorCode::kInvalidModel, "{}: tensor '{}' has dtype {}, expected {}",
               file.path(), printable(name), dtype_name(t.dtype), dtype_list(allowed));
  return file.get(name);
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, id] : where_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

int64_t WeightStore::parameter_count() const {
  int64_t n = 0;
  for (const auto& f : files_) {
    for (const auto& name : f.names()) n += shape_numel(f.info(name).shape);
  }
  return n;
}

int64_t WeightStore::total_bytes() const {
  int64_t n = 0;
  for (const auto& f : files_) n += static_cast<int64_t>(f.data_size());
  return n;
}

std::map<DType, int64_t> WeightStore::bytes_by_dtype() const {
  std::map<DType, int64_t> out;
  for (const auto& f : files_) {
    for (const auto& name : f.names()) {
      const auto& t = f.info(name);
      out[t.dtype] += static_cast<int64_t>(t.nbytes());
    }
  }
  return out;
}

}  // namespace sampan
