// The CUDA linear kernels (kernels/cuda/gemm.cuh) on Llama-3-8B shapes:
//   - bf16 weights: TFLOP/s of cuda::gemm (x f32 -> bf16, cuBLASLt, f32 out) against a direct
//     cublasGemmEx on the same bf16 operands (cuBLAS's own figure: our overhead is the x
//     conversion and the Lt heuristic cache);
//   - INT4 g128 and FP8 weights: TFLOP/s at every m, and at m <= 8 (the GEMV) the weight stream
//     in GB/s as a fraction of a device-to-device cudaMemcpy measured in the same run.
// Weights rotate over enough copies (>= 256 MB) that the GEMV cannot run out of L2.
// Usage: bench_cuda_gemm [--json] [--m LIST] [--weights LIST]: LIST is comma-separated (m values
// from 1, 8, 32, 128, 2048 by default; weights from bf16, int4, fp8). Exits 77 with a message when
// no GPU is visible, 2 on a bad option.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "kernels/cuda/gemm.cuh"

namespace {

using sampan::DType;
namespace cuda = sampan::cuda;

#define BENCH_CHECK(call)                                                                  \
  do {                                                                                     \
    const cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));     \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

__global__ void fill_bytes_kernel(uint8_t* p, size_t n, uint32_t seed, uint8_t mask) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    p[i] = static_cast<uint8_t>(h) & mask;  // FP8: mask keeps clear of NaN (0x7f / 0xff)
  }
}

template <typename T>
__global__ void fill_kernel(T* p, size_t n, T v) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    p[i] = v;
  }
}

void* device_bytes(size_t bytes, uint8_t mask) {
  void* p = nullptr;
  BENCH_CHECK(cudaMalloc(&p, bytes));
  fill_bytes_kernel<<<1024, 256>>>(static_cast<uint8_t*>(p), bytes, 12345u, mask);
  BENCH_CHECK(cudaGetLastError());
  return p;
}

// Mean seconds per call of fn over >= 50 ms (after 3 warm-up calls).
double time_it(const std::function<void(int)>& fn, cudaStream_t stream) {
  for (int i = 0; i < 3; ++i) fn(i);
  cudaEvent_t a, b;
  BENCH_CHECK(cudaEventCreate(&a));
  BENCH_CHECK(cudaEventCreate(&b));
  int iters = 1;
  double sec = 0;
  for (;;) {
    BENCH_CHECK(cudaEventRecord(a, stream));
    for (int i = 0; i < iters; ++i) fn(i);
    BENCH_CHECK(cudaEventRecord(b, stream));
    BENCH_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CHECK(cudaEventElapsedTime(&ms, a, b));
    sec = ms / 1e3 / iters;
    if (ms >= 50 || iters >= 4096) break;
    iters *= 4;
  }
  BENCH_CHECK(cudaEventDestroy(a));
  BENCH_CHECK(cudaEventDestroy(b));
  return sec;
}

struct Row {
  std::string what;
  int64_t m, n, k;
  double sec, tflops, gbps, ref_tflops;  // ref_tflops < 0: none
};

// Weight copies of one format: enough that a rotation streams from HBM, not L2.
struct Weights {
  std::vector<cuda::GemmWeights> copies;
  double bytes = 0;  // per copy, scales included
};

Weights make_weights(DType type, int64_t n, int64_t k) {
  const int64_t g = 128;
  const size_t data = static_cast<size_t>(type == DType::kI4 ? n * k / 2 : type == DType::kF8E4M3 ? n * k : n * k * 2);
  const size_t scales = type == DType::kI4 ? static_cast<size_t>(n * (k / g) * 2)
                        : type == DType::kF8E4M3 ? static_cast<size_t>(n * 4) : 0;
  Weights w;
  w.bytes = static_cast<double>(data + scales);
  const int copies = static_cast<int>(std::max<double>(1.0, 256e6 / w.bytes + 1));
  for (int c = 0; c < copies; ++c) {
    cuda::GemmWeights gw;
    gw.dtype = type;
    gw.k = k;
    gw.n_blocks = 1;
    gw.rows[0] = n;
    gw.group_size = type == DType::kI4 ? g : 0;
    // bf16 bytes masked to 0x3f keep every value finite and small; FP8 likewise avoids NaN.
    gw.data[0] = device_bytes(data, type == DType::kI4 ? 0xff : 0x3f);
    if (scales) {
      void* s = nullptr;
      BENCH_CHECK(cudaMalloc(&s, scales));
      if (type == DType::kI4) {
        fill_kernel<<<256, 256>>>(static_cast<uint16_t*>(s), scales / 2, uint16_t{0x211f});  // f16 0.01
      } else {
        fill_kernel<<<256, 256>>>(static_cast<float*>(s), scales / 4, 0.01f);
      }
      BENCH_CHECK(cudaGetLastError());
      gw.scales[0] = s;
      gw.scale_dtype = DType::kF16;
    }
    w.copies.push_back(gw);
  }
  return w;
}

void free_weights(Weights& w) {
  for (auto& gw : w.copies) {
    cudaFree(const_cast<void*>(gw.data[0]));
    if (gw.scales[0]) cudaFree(const_cast<void*>(gw.scales[0]));
  }
}

double copy_bandwidth(cudaStream_t stream) {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  BENCH_CHECK(cudaMalloc(&a, bytes));
  BENCH_CHECK(cudaMalloc(&b, bytes));
  const double sec = time_it(
      [&](int) { BENCH_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream)); }, stream);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(bytes) / sec / 1e9;  // read + write
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  std::vector<int64_t> ms = {1, 8, 32, 128, 2048};
  std::vector<DType> types = {DType::kBF16, DType::kI4, DType::kF8E4M3};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--m" && i + 1 < argc) {
      ms.clear();
      for (const std::string& v : sampan::bench::split_list(argv[++i])) {
        char* end = nullptr;
        const long long m = std::strtoll(v.c_str(), &end, 10);
        if (*end != '\0' || m < 1 || m > 2048) {
          std::fprintf(stderr, "bench_cuda_gemm: --m: '%s' is not a count in 1..2048\n", v.c_str());
          return 2;
        }
        ms.push_back(m);
      }
    } else if (a == "--weights" && i + 1 < argc) {
      types.clear();
      for (const std::string& v : sampan::bench::split_list(argv[++i])) {
        if (v == "bf16") types.push_back(DType::kBF16);
        else if (v == "int4") types.push_back(DType::kI4);
        else if (v == "fp8") types.push_back(DType::kF8E4M3);
        else {
          std::fprintf(stderr, "bench_cuda_gemm: --weights: unknown '%s' (bf16, int4, fp8)\n", v.c_str());
          return 2;
        }
      }
    } else {
      std::fprintf(stderr, "bench_cuda_gemm: unknown option '%s' (--json, --m LIST, --weights LIST)\n",
                   a.c_str());
      return 2;
    }
  }
  if (ms.empty() || types.empty()) {
    std::fprintf(stderr, "bench_cuda_gemm: --m and --weights need at least one value\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("bench_cuda_gemm: no CUDA device visible, nothing to measure\n");
    return 77;
  }
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) return 1;
  cublasSetStream(blas, stream);
  const double copy_gbps = copy_bandwidth(stream);

  const int64_t kShapes[][2] = {{4096, 4096}, {14336, 4096}, {4096, 14336}, {6144, 4096}};
  const int64_t max_m = 2048, max_k = 14336, max_n = 14336;
  float *x = nullptr, *y = nullptr;
  void* xb = nullptr;
  BENCH_CHECK(cudaMalloc(&x, sizeof(float) * max_m * max_k));
  BENCH_CHECK(cudaMalloc(&y, sizeof(float) * max_m * max_n));
  BENCH_CHECK(cudaMalloc(&xb, 2 * max_m * max_k));
  fill_kernel<<<1024, 256>>>(x, static_cast<size_t>(max_m * max_k), 0.5f);
  fill_kernel<<<1024, 256>>>(static_cast<uint16_t*>(xb), static_cast<size_t>(max_m * max_k),
                             uint16_t{0x3f00});  // bf16 0.5
  BENCH_CHECK(cudaGetLastError());

  std::vector<Row> rows;
  for (const auto& shape : kShapes) {
    const int64_t n = shape[0], k = shape[1];
    for (DType type : types) {
      Weights w = make_weights(type, n, k);
      for (int64_t m : ms) {
        auto ours = [&](int i) {
          const cuda::GemmWeights& gw = w.copies[static_cast<size_t>(i) % w.copies.size()];
          const cuda::GemmStatus s = cuda::gemm(m, x, k, gw, cuda::GemmEpilogue::kStore, y, n, stream);
          if (!s.ok()) {
            std::fprintf(stderr, "gemm failed: cuda %d cublas %s\n", s.cuda,
                         s.cublas ? cuda::cublas_status_name(s.cublas) : "-");
            std::exit(1);
          }
        };
        Row r{std::string(type == DType::kBF16 ? "bf16" : type == DType::kI4 ? "int4_g128" : "fp8"),
              m, n, k, time_it(ours, stream), 0, 0, -1};
        r.tflops = 2.0 * m * n * k / r.sec / 1e12;
        r.gbps = w.bytes / r.sec / 1e9;
        if (type == DType::kBF16) {
          // cuBLAS on the same operands: y^T[n, m] = W[n, k] . xb^T (column-major TN).
          const float alpha = 1, beta = 0;
          auto ref = [&](int i) {
            const cuda::GemmWeights& gw = w.copies[static_cast<size_t>(i) % w.copies.size()];
            cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                         static_cast<int>(k), &alpha, gw.data[0], CUDA_R_16BF, static_cast<int>(k),
                         xb, CUDA_R_16BF, static_cast<int>(k), &beta, y, CUDA_R_32F,
                         static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
          };
          r.ref_tflops = 2.0 * m * n * k / time_it(ref, stream) / 1e12;
        }
        rows.push_back(r);
      }
      free_weights(w);
    }
  }

  if (json) {
    std::printf("{\"copy_gbps\": %.1f, \"results\": [\n", copy_gbps);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf("  {\"weights\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"us\": %.2f, "
                  "\"tflops\": %.3f, \"weight_gbps\": %.1f, \"fraction_of_copy\": %.3f, "
                  "\"cublas_tflops\": %s}%s\n",
                  r.what.c_str(), static_cast<long long>(r.m), static_cast<long long>(r.n),
                  static_cast<long long>(r.k), r.sec * 1e6, r.tflops, r.gbps, r.gbps / copy_gbps,
                  r.ref_tflops < 0 ? "null" : std::to_string(r.ref_tflops).c_str(),
                  i + 1 < rows.size() ? "," : "");
    }
    std::printf("]}\n");
  } else {
    std::printf("device-to-device copy: %.1f GB/s\n", copy_gbps);
    std::printf("%-10s %6s %6s %6s %10s %9s %10s %8s %9s\n", "weights", "m", "n", "k", "us",
                "TFLOP/s", "weight GB/s", "of copy", "cuBLAS");
    for (const Row& r : rows) {
      std::printf("%-10s %6lld %6lld %6lld %10.2f %9.2f %10.1f %7.0f%% %9s\n", r.what.c_str(),
                  static_cast<long long>(r.m), static_cast<long long>(r.n),
                  static_cast<long long>(r.k), r.sec * 1e6, r.tflops, r.gbps,
                  100.0 * r.gbps / copy_gbps,
                  r.ref_tflops < 0 ? "-" : std::to_string(r.ref_tflops).substr(0, 6).c_str());
    }
  }
  cublasDestroy(blas);
  cudaFree(x);
  cudaFree(y);
  cudaFree(xb);
  cudaStreamDestroy(stream);
  return 0;
}
