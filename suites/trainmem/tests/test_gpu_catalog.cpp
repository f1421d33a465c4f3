// The GPU catalog's speeds (gpu_catalog.h, GpuSpeeds): what must hold of every card's figures
// whatever their values (a zero where a rate was forgotten, a sparse figure taken for a dense one, a
// unit slip of 1000, the PCIe link above the link it stands in for), peak_flops' choice of rate,
// and two anchors read off a datasheet.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <string>

#include "common/tensor/dtype.h"
#include "suites/trainmem/estimator/gpu_catalog.h"

namespace trainmem::estimator {
namespace {

// The cards without BF16 tensor cores (Volta, Turing), and, the same cards, without TF32: every
// other card has both.
const std::set<std::string> kNoBf16 = {"v100-16gb", "v100-32gb", "t4-16gb"};
const std::set<std::string> kNoTf32 = kNoBf16;

bool lacks(const std::set<std::string>& cards, const std::string& name) { return cards.count(name) > 0; }

TEST(GpuCatalogSpeeds, EveryCardHasEveryRateItsHardwareHas) {
  for (const std::string& name : kNoBf16) EXPECT_NO_THROW(find_gpu(name)) << name;  // no stale name in the list
  for (const GpuSpec& g : gpu_catalog()) {
    SCOPED_TRACE(g.name);
    const GpuSpeeds& s = g.speeds;
    EXPECT_GT(s.fp32_flops, 0);
    EXPECT_GT(s.fp16_flops, 0);
    EXPECT_GT(s.memory_bandwidth, 0);
    EXPECT_GT(s.intra_node_bandwidth, 0);
    EXPECT_GT(s.inter_node_bandwidth, 0);
    EXPECT_GT(s.pcie_bandwidth, 0);
    if (lacks(kNoBf16, g.name))
      EXPECT_EQ(s.bf16_flops, 0);
    else
      EXPECT_GT(s.bf16_flops, 0);
    if (lacks(kNoTf32, g.name))
      EXPECT_EQ(s.tf32_flops, 0);
    else
      EXPECT_GT(s.tf32_flops, 0);
  }
}

// Tensor cores beat the fp32 units on every card (by more than 1.5x: GeForce's fp32-accumulate rate,
// the slowest, is about twice its fp32 rate); TF32, where there is one, lies between fp32 and bf16. And no
// dense rate is the "with sparsity" figure: a card's bf16 and fp16 tensor rates are equal wherever
// it has both (one halved and not the other would show here).
TEST(GpuCatalogSpeeds, TensorRatesExceedFp32AndAreDense) {
  for (const GpuSpec& g : gpu_catalog()) {
    SCOPED_TRACE(g.name);
    const GpuSpeeds& s = g.speeds;
    EXPECT_GT(s.fp16_flops, 1.5 * s.fp32_flops);
    if (s.bf16_flops > 0) {
      EXPECT_GT(s.bf16_flops, 1.5 * s.fp32_flops);
      EXPECT_EQ(s.bf16_flops, s.fp16_flops);
    }
    if (s.tf32_flops > 0) {
      EXPECT_GE(s.tf32_flops, s.fp32_flops);
      EXPECT_LE(s.tf32_flops, s.bf16_flops);
    }
    // Rates in FLOP/s (not TFLOPS, not a slip of 1000): between 1 and 10,000 TFLOPS.
    for (double rate : {s.fp32_flops, s.fp16_flops}) {
      EXPECT_GT(rate, 1e12);
      EXPECT_LT(rate, 1e16);
    }
  }
}

// Bytes/s, decimal: device memory between 200 GB/s (the slowest GDDR here is the L4's 300) and
// 10 TB/s; the host link, one direction of a PCIe x16 (gen3 15.75 GB/s to gen5 63 GB/s), never
// above the peer link (NVLink, or the same PCIe link where a card has none) nor above memory.
TEST(GpuCatalogSpeeds, BandwidthsAreInRangeAndOrdered) {
  for (const GpuSpec& g : gpu_catalog()) {
    SCOPED_TRACE(g.name);
    const GpuSpeeds& s = g.speeds;
    EXPECT_GT(s.memory_bandwidth, 200e9);
    EXPECT_LT(s.memory_bandwidth, 10e12);
    EXPECT_GE(s.pcie_bandwidth, 15e9);
    EXPECT_LE(s.pcie_bandwidth, 64e9);
    EXPECT_LE(s.pcie_bandwidth, s.intra_node_bandwidth);
    EXPECT_LT(s.intra_node_bandwidth, s.memory_bandwidth);
    // One NIC's share, at most a 400 Gb/s NIC per GPU (50 GB/s), and below the in-node link.
    EXPECT_LE(s.inter_node_bandwidth, 50e9);
    EXPECT_LE(s.inter_node_bandwidth, s.intra_node_bandwidth);
  }
}

TEST(GpuCatalogSpeeds, PeakFlopsPicksTheDtypesRateAndFallsBack) {
  const GpuSpeeds s{1e12, 2e12, 4e12, 8e12, 0, 0, 0, 0};
  EXPECT_EQ(peak_flops(s, DType::f32), 1e12);  // not TF32's 2e12: trainmem keeps TF32 off
  EXPECT_EQ(peak_flops(s, DType::bf16), 4e12);
  EXPECT_EQ(peak_flops(s, DType::f16), 8e12);
  // No bf16 tensor cores (V100, T4): bf16 runs at the fp32 rate, fp16 still on the tensor cores.
  const GpuSpeeds volta{15e12, 0, 0, 120e12, 0, 0, 0, 0};
  EXPECT_EQ(peak_flops(volta, DType::bf16), 15e12);
  EXPECT_EQ(peak_flops(volta, DType::f16), 120e12);
  const GpuSpeeds& v100 = find_gpu("v100-32gb").speeds;
  EXPECT_EQ(peak_flops(v100, DType::bf16), v100.fp32_flops);
  EXPECT_EQ(peak_flops(v100, DType::f16), v100.fp16_flops);
  const GpuSpeeds& h100 = find_gpu("h100-80gb").speeds;
  EXPECT_EQ(peak_flops(h100, DType::bf16), h100.bf16_flops);
  EXPECT_EQ(peak_flops(h100, DType::f32), h100.fp32_flops);
  for (DType integer : {DType::i32, DType::u16, DType::i64}) {
    try {
      peak_flops(h100, integer);
      ADD_FAILURE() << to_string(integer) << " has no FLOP rate";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(to_string(integer))), std::string::npos) << e.what();
    }
  }
}

// Two anchors from "NVIDIA H100 Tensor Core GPU" datasheet, H100 SXM column: BF16 Tensor Core
// 1,979 TFLOPS with sparsity, 989.4 dense (the H100 architecture whitepaper's dense figure), and
// 3.35 TB/s of HBM3.
TEST(GpuCatalogSpeeds, H100SxmMatchesItsDatasheet) {
  const GpuSpeeds& s = find_gpu("h100-80gb").speeds;
  EXPECT_NEAR(s.bf16_flops, 989.4e12, 989.4e12 * 0.01);
  EXPECT_NEAR(s.memory_bandwidth, 3.35e12, 3.35e12 * 0.01);
}

}  // namespace
}  // namespace trainmem::estimator
