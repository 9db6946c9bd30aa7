// The per-conv layout choice (issue 16): which convs run in the blocked channel layout of the
// blocked conv (engine/ops/conv2d_nchwc.h, kernels/cpu/conv_nchwc_cpu.h) and which stay NCHW.
#pragma once

#include "engine/graph/graph.h"

namespace sampan::graph::passes {

// Rewrites regions of convs and pools into the blocked layout [N, ceil(C / B), H, W, B], B the
// block of this machine's CPU (ops::nchwc_block(): 16 with AVX-512, else 8):
//  - conv2d -> conv2d_nchwc when group == 1, the weight is a 4-D f32 constant, the bias is
//    absent or a constant, padding the output channels to a block multiple wastes at most a
//    quarter, and
//    either the input has fewer channels than a block (a stem conv: it reads the plain NCHW
//    input), or the input is already blocked, or a reader of its output is a conv or pool
//    that can join (an isolated conv would pay two reorders for little gain). The input
//    channels must also waste at most a quarter in padding when they are reordered. Weights
//    become new constants in the kernel's order [O/B, C/B, kh, kw, B, B] (stem:
//    [O/B, C, kh, kw, 1, B]), bias [O/B * B], padded with zeros. Grouped and depthwise convs
//    stay on the NCHW path.
//  - a conv with precision = "bf16" (its weight a bf16 constant, convert_precision_bf16) the
//    same way, where ops::nchwc_bf16_runs() (block 16, vdpbf16ps at the FMA rate, no AMX) and
//    it has at least a block of input channels: conv2d_nchwc with the weight moved into
//    [O/B, C/B, kh, kw, B/2, B, 2] (input channels in pairs), never Winograd. Elsewhere, and for
//    a bf16 stem, bf16 convs stay conv2d (conv2d_bf16's GEMM: AMX tiles, or vdpbf16ps).
//  - such a conv with a blocked input that is 3x3, stride 1, dilation 1, with at least 16 input
//    and output channels -> conv2d_winograd instead (engine/ops/conv2d_winograd.h), its weight
//    transformed once into [O/B, 36, C/B, B, B], where this CPU runs that kernel for the block
//    (8 on AVX2, 16 on AVX-512; both measured faster on ResNet-50, layout_passes.cc).
//  - pool2d (max/avg, global or not) whose input is blocked -> pool2d_nchwc.
//  - reorder_nchwc is inserted where an NCHW value enters the region (a conv's input or
//    residual), once per value; reorder_nchw where a blocked value leaves it (a graph output or
//    a reader outside the region): the rewritten node's original output value is produced by a
//    reorder_nchw, so graph outputs keep their names and readers outside stay unchanged.
// Returns the convs and pools rewritten. Run it after the conv fusions (fold_conv_batch_norm,
// fuse_conv_residual, fuse_conv_activation) so their epilogues travel into the blocked conv.
// The environment variable SAMPAN_CONV_LAYOUT=nchw turns the pass off (every conv stays NCHW:
// for A/B comparisons); any other value, or none, leaves it on.
// SAMPAN_CONV_WINOGRAD=0 keeps the 3x3 convs on conv2d_nchwc (A/B comparisons of the Winograd
// kernel); none, or any other value, leaves Winograd on.
int choose_conv_layout(Graph& graph);

}  // namespace sampan::graph::passes
