// KServe v2 gRPC ModelInferRequest messages: the input is the wire bytes of a request, parsed by
// protobuf as gRPC does and decoded as ModelInfer / ModelStreamInfer do (typed and raw tensor
// contents, BYTES length prefixes, shapes, parameters).
#include "proto/grpc_service.pb.h"
#include "server/kserve_decode.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  inference::ModelInferRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  try {
    const auto r = sampan::server::parse_kserve_proto(req);
    if (r.text && !r.ids.empty()) __builtin_trap();  // the decoder promises one or the other
  } catch (const sampan::server::RequestError&) {
  }
  return 0;
}
