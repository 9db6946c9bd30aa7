#include "engine/graph/executor.h"

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"

namespace sampan::graph {

Executor::Executor(const Graph& graph, cpu::TaskRunner& runner, Device device)
    : graph_(graph), runner_(runner), device_(device) {
  graph_.validate();
  const auto& registry = ops::OpRegistry::instance();
  for (const Node& n : graph_.nodes()) {
    SAMPAN_CHECK(registry.supports(n.op, device.type), ErrorCode::kUnsupported,
                 "node '{}': op '{}' has no kernel on {}", n.name, n.op, device.str());
    const ops::OpSchema& schema = registry.schema(n.op);
    schemas_.push_back(&schema);
    kernels_.push_back(schema.view ? nullptr : &registry.kernel(n.op, device.type));
  }
  const size_t nv = graph_.n_values();
  tensors_.resize(nv);
  shapes_.resize(nv);
  dtypes_.resize(nv);
  for (size_t v = 0; v < nv; ++v) {
    const Value& val = graph_.value(static_cast<ValueId>(v));
    if (val.kind == ValueKind::kConstant) {
      tensors_[v] = val.constant;
      shapes_[v] = val.constant.shape();
      dtypes_[v] = val.constant.dtype();
    }
  }
}

void Executor::bind_and_infer(const std::map<std::string, Tensor>& inputs) {
  std::map<std::string, int64_t> symbols;
  for (ValueId id : graph_.inputs()) {
    const Value& val = graph_.value(id);
    auto it = inputs.find(val.name);
    SAMPAN_CHECK(it != inputs.end(), ErrorCode::kInvalidArgument, "graph input '{}' is not bound",
                 val.name);
    const Tensor& t = it->second;
    SAMPAN_CHECK(t.dtype() == val.dtype, ErrorCode::kInvalidArgument,
                 "graph input '{}' is {}, expected {}", val.name, dtype_name(t.dtype()),
                 dtype_name(val.dtype));
    SAMPAN_CHECK(t.rank() == static_cast<int>(val.shape.size()), ErrorCode::kInvalidArgument,
                 "graph input '{}' has shape {}, expected rank {}", val.name,
                 shape_str(t.shape()), val.shape.size());
    for (size_t d = 0; d < val.shape.size(); ++d) {
      const Dim& dim = val.shape[d];
      const int64_t got = t.shape()[d];
      if (!dim.symbolic()) {
        SAMPAN_CHECK(got == dim.size, ErrorCode::kInvalidArgument,
                     "graph input '{}' has dim {} = {}, expected {}", val.name, d, got, dim.size);
        continue;
      }
      auto [sit, fresh] = symbols.emplace(dim.symbol, got);
      SAMPAN_CHECK(fresh || sit->second == got, ErrorCode::kInvalidArgument,
                   "graph input '{}' has dim {} = {} but '{}' is {} elsewhere", val.name, d, got,
                   dim.symbol, sit->second);
    }
    SAMPAN_CHECK(t.device() == device_, ErrorCode::kInvalidArgument,
                 "graph input '{}' is on {}, the graph runs on {}", val.name, t.device().str(),
                 device_.str());
    tensors_[static_cast<size_t>(id)] = t;
    shapes_[static_cast<size_t>(id)] = t.shape();
    dtypes_[static_cast<size_t>(id)] = t.dtype();
  }
  infer_shapes();
}

void Executor::infer_shapes() {
  std::vector<ops::TensorDesc> in;
  for (size_t ni = 0; ni < graph_.nodes().size(); ++ni) {
    const Node& n = graph_.nodes()[ni];
    in.clear();
    for (ValueId v : n.inputs) {
      if (v == kNoValue) {
        in.push_back({{}, DType::kF32, false});
      } else {
        in.push_back({shapes_[static_cast<size_t>(v)], dtypes_[static_cast<size_t>(v)], true});
      }
    }
    std::vector<ops::TensorDesc> out = schemas_[ni]->infer(n, in);
    SAMPAN_CHECK(out.size() == n.outputs.size(), ErrorCode::kInternal,
                 "node '{}': op '{}' inferred {} outputs, node has {}", n.name, n.op, out.size(),
                 n.outputs.size());
    for (size_t i = 0; i < out.size(); ++i) {
      shapes_[static_cast<size_t>(n.outputs[i])] = out[i].shape;
      dtypes_[static_cast<size_t>(n.outputs[i])] = out[i].dtype;
    }
  }
}

void Executor::make_plan() {
  const auto& nodes = graph_.nodes();
  const int n_steps = static_cast<int>(nodes.size());
  buffer_of_.assign(graph_.n_values(), -1);
  // root_[v]: the planned buffer that holds v's memory (views share their source's buffer).
  std::vector<int> root(graph_.n_values(), -1);
  std::vector<BufferRequest> requests;
  for (int i = 0; i < n_steps; ++i) {
    const Node& n = nodes[static_cast<size_t>(i)];
    const bool is_view = kernels_[static_cast<size_t>(i)] == nullptr;
    for (ValueId in : n.inputs) {
      if (in == kNoValue) continue;
      const int r = root[static_cast<size_t>(in)];
      if (r >= 0) requests[static_cast<size_t>(r)].last_use = i;
    }
    for (ValueId out : n.outputs) {
      if (is_view) {
        root[static_cast<size_t>(out)] = n.inputs.empty() ? -1 : root[static_cast<size_t>(n.inputs[0])];
        continue;
      }
      const int64_t bytes = dtype_storage_bytes(dtypes_[static_cast<size_t>(out)],
                                                shape_numel(shapes_[static_cast<size_t>(out)]));
      requests.push_back({bytes, i, i});
      root[static_cast<size_t>(out)] = static_cast<int>(requests.size() - 1);
      buffer_of_[static_cast<size_t>(out)] = root[static_cast<size_t>(out)];
    }
  }
  for (ValueId out : graph_.outputs()) {
    const int r = root[static_cast<size_t>(out)];
    if (r >= 0) requests[static_cast<size_t>(r)].last_use = n_steps;
  }
  plan_ = plan_memory(requests);
}

void Executor::ensure_arena() {
  if (!arena_ || arena_->bytes() < static_cast<size_t>(plan_.arena_bytes)) {
    arena_.reset();  // free the old arena before allocating the larger one
    arena_ = Storage::allocate(static_cast<size_t>(std::max<int64_t>(plan_.arena_bytes, 64)), device_);
  }
}

MemoryPlan Executor::plan_for(const std::map<std::string, Shape>& input_shapes) {
  for (ValueId id : graph_.inputs()) {
    const Value& val = graph_.value(id);
    auto it = input_shapes.find(val.name);
    SAMPAN_CHECK(it != input_shapes.end(), ErrorCode::kInvalidArgument,
                 "graph input '{}' has no shape", val.name);
    shapes_[static_cast<size_t>(id)] = it->second;
    dtypes_[static_cast<size_t>(id)] = val.dtype;
  }
  infer_shapes();
  make_plan();
  MemoryPlan result = plan_;
  planned_input_shapes_.clear();  // the next run() plans for its own shapes
  return result;
}

std::vector<Tensor> Executor::run(const std::map<std::string, Tensor>& inputs) {
  bind_and_infer(inputs);
  std::vector<Shape> input_shapes;
  for (ValueId id : graph_.inputs()) input_shapes.push_back(shapes_[static_cast<size_t>(id)]);
  if (input_shapes != planned_input_shapes_ || !arena_) {
    make_plan();
    ensure_arena();
    planned_input_shapes_ = std::move(input_shapes);
  }
  std::vector<Tensor> in, out;
  for (size_t ni = 0; ni < graph_.nodes().size(); ++ni) {
    const Node& n = graph_.nodes()[ni];
    in.clear();
    out.clear();
    for (ValueId v : n.inputs) in.push_back(v == kNoValue ? Tensor() : tensors_[static_cast<size_t>(v)]);
    if (!kernels_[ni]) {
      out = schemas_[ni]->view(n, in);
    } else {
      for (ValueId v : n.outputs) {
        const int b = buffer_of_[static_cast<size_t>(v)];
        out.push_back(Tensor::from_storage(arena_, static_cast<size_t>(plan_.offsets[static_cast<size_t>(b)]),
                                           shapes_[static_cast<size_t>(v)],
                                           dtypes_[static_cast<size_t>(v)]));
      }
      (*kernels_[ni])(ops::KernelContext{n, in, out, runner_});
    }
    for (size_t i = 0; i < n.outputs.size(); ++i) tensors_[static_cast<size_t>(n.outputs[i])] = out[i];
  }
  std::vector<Tensor> result;
  for (ValueId v : graph_.outputs()) result.push_back(tensors_[static_cast<size_t>(v)]);
  return result;
}

}  // namespace sampan::graph
