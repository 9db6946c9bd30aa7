// Per-op-type time report of a profiled executor (Executor::set_profiling), shared by
// `sampan infer --profile` and `sampan bench --profile`.
#pragma once

#include <cstdio>
#include <vector>

#include "engine/graph/graph.h"

namespace sampan::cli {

// Prints the time per op type (ms per `per`, share of the total) and the ten slowest nodes to
// `out`. seconds: [nodes], each node's time summed over `per` runs (or tokens).
void print_op_profile(std::FILE* out, const graph::Graph& g, const std::vector<double>& seconds,
                      int64_t per, const char* unit);

}  // namespace sampan::cli
