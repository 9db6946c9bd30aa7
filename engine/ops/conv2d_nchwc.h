// The blocked-layout ops (conv2d_nchwc.cc, pool2d_nchwc.cc, reorder_nchwc.cc, reorder_nchw.cc;
// their CPU kernels: kernels/cpu/conv_nchwc_cpu.h) as the layout pass (engine/graph/passes/
// layout_passes.h) sees them. A blocked tensor of C channels is [N, ceil(C / B), H, W, B].
#pragma once

#include <cstdint>

namespace sampan::ops {

// The channel block the blocked conv runs fastest with on this machine's CPU: 16 where the
// AVX-512 tile runs, else 8.
int64_t nchwc_block();

// Whether bf16 convs run blocked on this machine's CPU (conv2d_nchwc with a bf16 weight,
// kernels/cpu/conv_nchwc_cpu.h nchwc_bf16_runs): where vdpbf16ps runs at the FMA rate, no AMX.
bool nchwc_bf16_runs();

}  // namespace sampan::ops
