// KServe v2 REST infer bodies: the input is an HTTP body, parsed (depth limited) and decoded as
// POST /v2/models/{m}/infer does.
#include "server/kserve_decode.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sampan::server;
  try {
    const KserveInferRequest r = parse_kserve_json(parse_json_object(sampan::fuzz::as_text(data, size)));
    if (r.text && !r.ids.empty()) __builtin_trap();  // the decoder promises one or the other
  } catch (const RequestError&) {
  }
  return 0;
}
