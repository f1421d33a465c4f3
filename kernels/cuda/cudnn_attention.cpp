// cuDNN SDPA through cudnn-frontend (interface and layout in kernels/cudnn_attention.h).
// Host code only (cudnn-frontend is a header-only C++ library over cuDNN's backend API): compiled
// by the host compiler with the CUDA runtime's headers, only where TRAINMEM_WITH_CUDNN_FRONTEND.
//
// Build steps of a graph, each of which can say "not supported": validate (shapes, attributes),
// build_operation_graph (the backend op graph), create_execution_plans (heuristics mode A: the
// engines cuDNN proposes for this graph on this GPU), check_support (whether one of them accepts
// these strides and sizes), build_plans (compile the first that does). A failure there marked
// GRAPH_NOT_SUPPORTED / plan creation / heuristics becomes cudnn::NotSupported; anything else is
// reported as an error.
#include "kernels/cudnn_attention.h"

#include <cuda_runtime.h>
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <tuple>
#include <unordered_map>

namespace trainmem::kernels::cudnn {

namespace {

namespace fe = cudnn_frontend;

// Tensor uids of the variant packs.
enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV };

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("cudnn attention: ") + what + ": " + cudaGetErrorString(status));
}
void check_cudnn(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cudnn attention: ") + what + ": " + cudnnGetErrorString(status));
}

bool is_not_supported(fe::error_code_t code) {
  return code == fe::error_code_t::GRAPH_NOT_SUPPORTED ||
         code == fe::error_code_t::GRAPH_EXECUTION_PLAN_CREATION_FAILED ||
         code == fe::error_code_t::HEURISTIC_QUERY_FAILED;
}

enum class Pass { forward, backward };

struct Key {
  int device;
  Pass pass;
  cuda::Half16 dtype;
  std::size_t B, T, H, Hkv, D;  // Hkv resolved (kv_heads()): 0 and H are the same graph
  bool causal;
  bool operator<(const Key& o) const {
    return std::tie(device, pass, dtype, B, T, H, Hkv, D, causal) <
           std::tie(o.device, o.pass, o.dtype, o.B, o.T, o.H, o.Hkv, o.D, o.causal);
  }
};

// A built graph, or why none could be built (kept, so an unsupported shape is not retried).
struct Entry {
  std::shared_ptr<fe::graph::Graph> graph;
  std::int64_t workspace = 0;
  std::string not_supported;  // non-empty: cuDNN said no
};

struct State {
  std::mutex mutex;
  std::map<int, cudnnHandle_t> handles;  // per device; never destroyed (they live as long as the process)
  std::map<Key, Entry> graphs;
};
State& state() {
  static State* s = new State();  // leaked on purpose: no cuDNN teardown after the CUDA runtime's
  return *s;
}

cudnnHandle_t handle_for(State& s, int device) {
  auto it = s.handles.find(device);
  if (it != s.handles.end()) return it->second;
  cudnnHandle_t h = nullptr;
  check_cudnn(cudnnCreate(&h), "cudnnCreate");
  s.handles.emplace(device, h);
  return h;
}

// Q, K, V (and dQ, dK, dV) inside rows of W = (H + 2 Hkv) D elements.
std::vector<std::int64_t> qkv_strides(const AttentionShape& s) {
  const auto T = static_cast<std::int64_t>(s.T), W = static_cast<std::int64_t>(s.qkv_width()),
             D = static_cast<std::int64_t>(s.D);
  return {T * W, D, W, 1};
}
std::vector<std::int64_t> out_strides(const AttentionShape& s) {
  const auto T = static_cast<std::int64_t>(s.T), C = static_cast<std::int64_t>(s.C()),
             D = static_cast<std::int64_t>(s.D);
  return {T * C, D, C, 1};
}
// {B, heads, T, D}: heads = H for Q, O, dO; Hkv for K, V.
std::vector<std::int64_t> bhtd(const AttentionShape& s, std::size_t heads) {
  return {static_cast<std::int64_t>(s.B), static_cast<std::int64_t>(heads), static_cast<std::int64_t>(s.T),
          static_cast<std::int64_t>(s.D)};
}
std::vector<std::int64_t> bhtd(const AttentionShape& s) { return bhtd(s, s.H); }
std::vector<std::int64_t> kv_bhtd(const AttentionShape& s) { return bhtd(s, s.kv_heads()); }
std::vector<std::int64_t> stats_dims(const AttentionShape& s) {
  return {static_cast<std::int64_t>(s.B), static_cast<std::int64_t>(s.H), static_cast<std::int64_t>(s.T), 1};
}
std::vector<std::int64_t> stats_strides(const AttentionShape& s) {
  const auto H = static_cast<std::int64_t>(s.H), T = static_cast<std::int64_t>(s.T);
  return {H * T, T, 1, 1};
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, Uid uid,
                                                    std::vector<std::int64_t> dims,
                                                    std::vector<std::int64_t> strides) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides));
}

std::shared_ptr<fe::graph::Graph> new_graph(cuda::Half16 dtype) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(dtype == cuda::Half16::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

std::shared_ptr<fe::graph::Graph> describe_forward(cuda::Half16 dtype, const AttentionShape& s) {
  auto g = new_graph(dtype);
  auto q = input(*g, "Q", kQ, bhtd(s), qkv_strides(s));
  auto k = input(*g, "K", kK, kv_bhtd(s), qkv_strides(s));
  auto v = input(*g, "V", kV, kv_bhtd(s), qkv_strides(s));
  auto options = fe::graph::SDPA_attributes()
                     .set_name("trainmem_sdpa_forward")
                     .set_generate_stats(true)
                     .set_attn_scale(1.0f / std::sqrt(static_cast<float>(s.D)));
  if (s.causal)
    options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
  auto [o, stats] = g->sdpa(q, k, v, options);
  o->set_output(true).set_uid(kO).set_dim(bhtd(s)).set_stride(out_strides(s));
  stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim(stats_dims(s)).set_stride(
      stats_strides(s));
  return g;
}

std::shared_ptr<fe::graph::Graph> describe_backward(cuda::Half16 dtype, const AttentionShape& s) {
  auto g = new_graph(dtype);
  auto q = input(*g, "Q", kQ, bhtd(s), qkv_strides(s));
  auto k = input(*g, "K", kK, kv_bhtd(s), qkv_strides(s));
  auto v = input(*g, "V", kV, kv_bhtd(s), qkv_strides(s));
  auto o = input(*g, "O", kO, bhtd(s), out_strides(s));
  auto dout = input(*g, "dO", kdO, bhtd(s), out_strides(s));
  auto stats = g->tensor(fe::graph::Tensor_attributes()
                             .set_name("Stats")
                             .set_uid(kStats)
                             .set_dim(stats_dims(s))
                             .set_stride(stats_strides(s))
                             .set_data_type(fe::DataType_t::FLOAT));
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("trainmem_sdpa_backward")
                     .set_attn_scale(1.0f / std::sqrt(static_cast<float>(s.D)));
  if (s.causal)
    options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, options);
  dq->set_output(true).set_uid(kdQ).set_dim(bhtd(s)).set_stride(qkv_strides(s));
  dk->set_output(true).set_uid(kdK).set_dim(kv_bhtd(s)).set_stride(qkv_strides(s));
  dv->set_output(true).set_uid(kdV).set_dim(kv_bhtd(s)).set_stride(qkv_strides(s));
  return g;
}

// One build step: OK, or NotSupported / runtime_error with the step and cuDNN's message.
void step(fe::error_t status, const char* what, std::string& not_supported) {
  if (status.is_good()) return;
  std::ostringstream msg;
  msg << "cuDNN SDPA graph: " << what << " failed: " << status.get_message();
  if (is_not_supported(status.get_code())) {
    not_supported = msg.str();
    return;
  }
  throw std::runtime_error(msg.str());
}

Entry build(cudnnHandle_t handle, Pass pass, cuda::Half16 dtype, const AttentionShape& shape) {
  Entry e;
  e.graph = pass == Pass::forward ? describe_forward(dtype, shape) : describe_backward(dtype, shape);
  fe::graph::Graph& g = *e.graph;
  step(g.validate(), "validate", e.not_supported);
  if (e.not_supported.empty()) step(g.build_operation_graph(handle), "build_operation_graph", e.not_supported);
  if (e.not_supported.empty())
    step(g.create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans", e.not_supported);
  if (e.not_supported.empty()) step(g.check_support(handle), "check_support", e.not_supported);
  if (e.not_supported.empty()) step(g.build_plans(handle), "build_plans", e.not_supported);
  if (e.not_supported.empty()) step(g.get_workspace_size(e.workspace), "get_workspace_size", e.not_supported);
  if (!e.not_supported.empty()) e.graph.reset();
  return e;
}

void check_shape(const AttentionShape& s, const char* op) {
  if (s.B == 0 || s.T == 0 || s.H == 0 || s.D == 0)
    throw std::invalid_argument(std::string(op) + ": empty shape");
  check_kv_heads(s.H, s.Hkv, op);
}

// The cached graph of (current device, pass, dtype, shape), built on first use; the lock is held
// by the caller for as long as it uses the handle.
const Entry& entry(State& s, int device, Pass pass, cuda::Half16 dtype, const AttentionShape& shape) {
  const Key key{device, pass, dtype, shape.B, shape.T, shape.H, shape.kv_heads(), shape.D, shape.causal};
  auto it = s.graphs.find(key);
  if (it == s.graphs.end()) it = s.graphs.emplace(key, build(handle_for(s, device), pass, dtype, shape)).first;
  if (!it->second.not_supported.empty()) throw NotSupported(it->second.not_supported);
  return it->second;
}

int current_device() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

std::size_t workspace_bytes(Pass pass, cuda::Half16 dtype, const AttentionShape& shape, const char* op) {
  check_shape(shape, op);
  State& s = state();
  const int device = current_device();
  std::lock_guard<std::mutex> lock(s.mutex);
  return static_cast<std::size_t>(entry(s, device, pass, dtype, shape).workspace);
}

void execute(Pass pass, cuda::Half16 dtype, const AttentionShape& shape, void* stream,
             std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*>& pack, void* workspace, const char* op) {
  check_shape(shape, op);
  State& s = state();
  const int device = current_device();
  std::lock_guard<std::mutex> lock(s.mutex);
  const Entry& e = entry(s, device, pass, dtype, shape);
  if (e.workspace > 0 && workspace == nullptr)
    throw std::invalid_argument(std::string(op) + ": needs a workspace of " + std::to_string(e.workspace) + " bytes");
  cudnnHandle_t h = handle_for(s, device);
  check_cudnn(cudnnSetStream(h, static_cast<cudaStream_t>(stream)), "cudnnSetStream");
  auto status = e.graph->execute(h, pack, workspace);
  if (status.is_bad()) throw std::runtime_error(std::string(op) + ": cuDNN execute failed: " + status.get_message());
}

// Where K and V start in a qkv row: after the H query heads, and after the Hkv key heads.
std::size_t k_column(const AttentionShape& s) { return s.C(); }
std::size_t v_column(const AttentionShape& s) { return s.C() + s.kv_heads() * s.D; }

}  // namespace

std::string version() {
  const std::size_t v = cudnnGetVersion();  // e.g. 91900 = 9.19.0
  std::ostringstream out;
  out << "cuDNN " << v / 10000 << '.' << (v / 100) % 100 << '.' << v % 100 << " (frontend "
      << CUDNN_FRONTEND_MAJOR_VERSION << '.' << CUDNN_FRONTEND_MINOR_VERSION << '.' << CUDNN_FRONTEND_PATCH_VERSION
      << ")";
  return out.str();
}

std::size_t attention_forward_workspace_bytes(cuda::Half16 dtype, const AttentionShape& shape) {
  return workspace_bytes(Pass::forward, dtype, shape, "cudnn::attention_forward_workspace_bytes");
}

void attention_forward(void* stream, cuda::Half16 dtype, std::uint16_t* out, float* stats, const std::uint16_t* qkv,
                       void* workspace, const AttentionShape& shape) {
  auto* base = const_cast<std::uint16_t*>(qkv);  // cuDNN's variant pack takes void*; inputs are only read
  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack = {
      {kQ, base}, {kK, base + k_column(shape)}, {kV, base + v_column(shape)}, {kO, out}, {kStats, stats}};
  execute(Pass::forward, dtype, shape, stream, pack, workspace, "cudnn::attention_forward");
}

std::size_t attention_backward_workspace_bytes(cuda::Half16 dtype, const AttentionShape& shape) {
  return workspace_bytes(Pass::backward, dtype, shape, "cudnn::attention_backward_workspace_bytes");
}

void attention_backward(void* stream, cuda::Half16 dtype, std::uint16_t* dqkv, const std::uint16_t* dout,
                        const std::uint16_t* qkv, const std::uint16_t* out, const float* stats, void* workspace,
                        const AttentionShape& shape) {
  const std::size_t k_col = k_column(shape), v_col = v_column(shape);
  auto* base = const_cast<std::uint16_t*>(qkv);
  std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack = {
      {kQ, base},
      {kK, base + k_col},
      {kV, base + v_col},
      {kO, const_cast<std::uint16_t*>(out)},
      {kdO, const_cast<std::uint16_t*>(dout)},
      {kStats, const_cast<float*>(stats)},
      {kdQ, dqkv},
      {kdK, dqkv + k_col},
      {kdV, dqkv + v_col}};
  execute(Pass::backward, dtype, shape, stream, pack, workspace, "cudnn::attention_backward");
}

}  // namespace trainmem::kernels::cudnn
