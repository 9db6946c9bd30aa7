// The GGUF reader: header, key/value section and tensor table, then every key read back with
// every getter (the wrong-type ones must refuse cleanly), every tensor's bytes touched, then the
// tokenizer built from the file's metadata.
#include "engine/core/error.h"
#include "engine/loaders/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

template <typename F>
void refused_or_read(F&& f) {
  try {
    f();
  } catch (const sampan::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      sampan::fuzz::write_temp("model.gguf", sampan::fuzz::as_text(data, size));
  std::shared_ptr<const sampan::gguf::GgufFile> g;
  try {
    g = sampan::gguf::GgufFile::open(path);
  } catch (const sampan::Error&) {
    return 0;
  }
  for (const std::string& key : g->keys()) {
    refused_or_read([&] { (void)g->get_string(key); });
    refused_or_read([&] { (void)g->get_int(key); });
    refused_or_read([&] { (void)g->get_bool(key); });
    refused_or_read([&] { (void)g->get_string_array(key); });
    refused_or_read([&] { (void)g->get_f32_array(key); });
    refused_or_read([&] { (void)g->get_int_array(key); });
    refused_or_read([&] { (void)g->get_float(key); });
  }
  // Every tensor the table accepted lies inside the file: touch its first and last byte (ASan
  // reports a read outside the mapping).
  unsigned sum = 0;
  for (const auto& t : g->tensors()) {
    if (t.nbytes == 0) continue;
    const uint8_t* p = g->tensor_data(t);
    sum += p[0] + p[t.nbytes - 1];
    (void)t.str();
  }
  (void)sum;
  refused_or_read([&] {
    const auto tok = sampan::tok::load_tokenizer(path);
    const auto ids = tok->encode("Hello, world! 123 \xC3\xA9t\xC3\xA9", true);
    (void)tok->decode(ids, false);
  });
  return 0;
}
