// The stages of the Winograd conv (conv_winograd_cpu.h) that conv_winograd_cpu.cc's driver
// calls, one set per instruction set: block 16 on AVX-512 (conv_winograd_avx512.cc), block 8 on
// AVX2 + FMA (conv_winograd_avx2.cc); both from conv_winograd_stages.h. Call a set only where
// its instruction set runs.
#pragma once

#include <cstdint>

#include "kernels/cpu/conv_winograd_cpu.h"

namespace sampan::cpu::winograd_detail {

// Tiles [t0, t0 + nt) (numbered image-major, then tile row, tile column) ->
// v: [36][s.in_blocks][nt][block], the transformed input patches.
using InputFn = void (*)(const WinogradConvShape& s, const float* x, int64_t t0, int nt,
                         float* v);

// Output blocks [ob0, ob1) of tiles [t0, t0 + nt): the 36 GEMMs of v (InputFn's) with u
// (winograd_transform_weights'), then the output transform, bias, residual, activation and the
// store into y (conv2d_winograd's layouts). m: scratch [36][2][nt][block].
using OutputFn = void (*)(const WinogradConvShape& s, const float* v, int64_t t0, int nt,
                          const float* u, int64_t ob0, int64_t ob1, const float* bias,
                          const float* residual, const ConvEpilogue& ep, float* m, float* y);

struct Stages {
  int64_t block = 0;
  int group_tiles = 0;  // tiles per task: what keeps v in L2 and fills the register tile
  InputFn input = nullptr;
  OutputFn output = nullptr;
};

Stages stages_avx512();  // block 16
Stages stages_avx2();    // block 8

}  // namespace sampan::cpu::winograd_detail
