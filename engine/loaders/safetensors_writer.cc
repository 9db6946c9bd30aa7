#include "engine/loaders/safetensors_writer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/core/error.h"

namespace sampan {
namespace {

using nlohmann::ordered_json;

// How a tensor is stored: kI4 becomes I8 with half the last dimension.
struct Stored {
  const NamedTensor* t;
  DType dtype;
  Shape shape;
  int64_t bytes;
};

Stored stored_form(const NamedTensor& nt) {
  const Tensor& t = nt.tensor;
  SAMPAN_CHECK(t.device().type == DeviceType::kCPU, ErrorCode::kInvalidArgument,
               "cannot write tensor '{}': it is on {}", nt.name, t.device().str());
  Stored s{&nt, t.dtype(), t.shape(), t.nbytes()};
  if (t.dtype() == DType::kI4) {
    SAMPAN_CHECK(t.rank() >= 1 && t.dim(-1) % 2 == 0 && t.is_contiguous(),
                 ErrorCode::kInvalidArgument,
                 "cannot write tensor '{}': packed i4 {} needs a contiguous even last dimension",
                 nt.name, t.str());
    s.dtype = DType::kI8;
    s.shape.back() /= 2;
  }
  return s;
}

int64_t element_bytes(DType t) { return std::max(1, dtype_bits(t) / 8); }

}  // namespace

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<Stored> order;
  std::set<std::string> names;
  for (const NamedTensor& nt : tensors) {
    SAMPAN_CHECK(names.insert(nt.name).second, ErrorCode::kInvalidArgument,
                 "{}: tensor '{}' is given twice", path, nt.name);
    order.push_back(stored_form(nt));
  }
  // Larger elements first keeps every tensor aligned to its element size (see the header).
  std::stable_sort(order.begin(), order.end(), [](const Stored& a, const Stored& b) {
    return element_bytes(a.dtype) > element_bytes(b.dtype);
  });
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json m = ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  int64_t offset = 0;
  for (const Stored& s : order) {
    header[s.t->name] = {{"dtype", dtype_safetensors_name(s.dtype)},
                         {"shape", s.shape},
                         {"data_offsets", {offset, offset + s.bytes}}};
    offset += s.bytes;
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');

  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    SAMPAN_CHECK(out.good(), ErrorCode::kIo, "{}: cannot open for writing", tmp);
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const Stored& s : order) {
      const Tensor c = s.t->tensor.contiguous();
      out.write(static_cast<const char*>(c.raw()), static_cast<std::streamsize>(s.bytes));
    }
    out.flush();
    SAMPAN_CHECK(out.good(), ErrorCode::kIo, "{}: write failed (disk full?)", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  SAMPAN_CHECK(!ec, ErrorCode::kIo, "{}: cannot rename to {}: {}", tmp, path, ec.message());
}

std::vector<std::string> write_safetensors_dir(const std::string& dir,
                                               const std::vector<NamedTensor>& tensors,
                                               int64_t max_shard_bytes) {
  std::vector<std::vector<NamedTensor>> shards(1);
  int64_t in_shard = 0;
  for (const NamedTensor& nt : tensors) {
    const int64_t b = nt.tensor.nbytes();
    if (in_shard > 0 && in_shard + b > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(nt);
    in_shard += b;
  }
  const std::filesystem::path root(dir);
  std::vector<std::string> files;
  if (shards.size() == 1) {
    write_safetensors((root / "model.safetensors").string(), shards[0]);
    files.push_back("model.safetensors");
    return files;
  }
  ordered_json weight_map = ordered_json::object();
  int64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name =
        fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    write_safetensors((root / name).string(), shards[i]);
    files.push_back(name);
    for (const NamedTensor& nt : shards[i]) {
      weight_map[nt.name] = name;
      total += nt.tensor.nbytes();
    }
  }
  const ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_text_file((root / "model.safetensors.index.json").string(), index.dump(2) + "\n");
  files.push_back("model.safetensors.index.json");
  return files;
}

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    SAMPAN_CHECK(out.good(), ErrorCode::kIo, "{}: cannot open for writing", tmp);
    out << text;
    out.flush();
    SAMPAN_CHECK(out.good(), ErrorCode::kIo, "{}: write failed (disk full?)", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  SAMPAN_CHECK(!ec, ErrorCode::kIo, "{}: cannot rename to {}: {}", tmp, path, ec.message());
}

}  // namespace sampan
