// Grouped-query attention (GQA): the head layout every attention kernel shares (attention.h,
// flash_attention.h, cudnn_attention.h).
//
// A row of the fused qkv projection, and of its gradient dqkv, holds the H query heads, then the
// Hkv key heads, then the Hkv value heads, each D wide:
//     qkv[B, T, (H + 2*Hkv) * D] = [ q_0 .. q_{H-1} | k_0 .. k_{Hkv-1} | v_0 .. v_{Hkv-1} ]
// Query head h attends with key/value head g = h / (H / Hkv): the H / Hkv query heads of a group
// share one K/V head, read where it is (never copied out to H heads). Hkv = H is multi-head
// attention (qkv [B, T, 3C], C = H*D); Hkv = 1 is multi-query attention. out, dout and the
// per-row statistics stay per query head ([B, T, C], [B, H, T], [B, H, T, T]).
// Backward: dK and dV of a K/V head are the sums over its group's query heads,
//     dk_g = sum_{h in group g} dS_h^T Q_h / sqrt(D),   dv_g = sum_{h in group g} P_h^T dO_h,
// added in the order of the heads h (deterministic).
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>

namespace trainmem::kernels {

// The K/V head count as the APIs take it: 0 (their default) means H, multi-head attention, so
// calls written before GQA keep their meaning.
constexpr std::size_t kv_heads_or_all(std::size_t H, std::size_t Hkv) { return Hkv == 0 ? H : Hkv; }

// Refuses a K/V head count that does not split the H query heads into equal groups (std::invalid_argument
// naming `op`). H = 0 is an empty shape: nothing to check.
inline void check_kv_heads(std::size_t H, std::size_t Hkv, const char* op) {
  if (H == 0) return;
  const std::size_t kv = kv_heads_or_all(H, Hkv);
  if (kv > H || H % kv != 0)
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(kv) + " K/V heads for " + std::to_string(H) +
                                " query heads (grouped-query attention needs H to be a multiple of Hkv)");
}

}  // namespace trainmem::kernels
