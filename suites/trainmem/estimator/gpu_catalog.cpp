#include "suites/trainmem/estimator/gpu_catalog.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <vector>

#include "common/cli/suggestion.h"

namespace trainmem::estimator {

namespace {
constexpr std::size_t mib(std::size_t n) { return n << 20; }

// Decimal units, as the datasheets give them.
constexpr double kTera = 1e12;  // TFLOPS, TB/s
constexpr double kGiga = 1e9;   // GB/s
// One direction of a PCIe x16 link, theoretical: 8, 16, 32 GT/s per lane x 16 lanes, 128b/130b
// encoding (the vendors' "PCIe Gen4: 64 GB/s" is both directions, before encoding).
constexpr double kPcieGen3 = 15.75e9;
constexpr double kPcieGen4 = 31.5e9;
constexpr double kPcieGen5 = 63.0e9;
// Inter-node, per GPU: one 400 Gb/s NIC per GPU (DGX H100, DGX H200, DGX B200: 8 ConnectX-7 for 8
// GPUs; Azure ND MI300X v5: 8 x 400 Gb/s NDR InfiniBand for 8 GPUs).
constexpr double kNic400PerGpu = 400e9 / 8;
// Inter-node, per GPU, in a PCIe server with one 100 Gb/s NIC for its 8 cards (AWS g5.48xlarge and
// g6.48xlarge; for the A10, RTX 3090, RTX 4090 and RTX A6000, which have no vendor reference
// system, an assumption of that common shape).
constexpr double kNic100Per8Gpus = 100e9 / 8 / 8;

std::string lower_case(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}
}  // namespace

// Each total as the card reports it by default (see gpu_catalog.h): nvidia-smi's memory.total,
// rocm-smi's VRAM total.
//
// The speeds (GpuSpeeds: dense, decimal; a datasheet's "with sparsity" tensor figure is halved),
// and where each card's come from:
// h100-80gb: "NVIDIA H100 Tensor Core GPU" datasheet, H100 SXM column (https://www.nvidia.com/en-us/data-center/h100/), dense rates as the "NVIDIA H100 Tensor Core GPU Architecture" whitepaper gives them (66.9 / 494.7 / 989.4 TFLOPS); NVLink 900 GB/s both ways; NICs: DGX H100 (8 x ConnectX-7 400 Gb/s).
// h200-141gb: "NVIDIA H200 Tensor Core GPU" datasheet, H200 SXM column (https://www.nvidia.com/en-us/data-center/h200/): the H100 SXM's compute (67 / 989* / 1,979* TFLOPS, * sparse), 4.8 TB/s; NICs: DGX H200 (8 x ConnectX-7 400 Gb/s).
// b200-180gb: NVIDIA HGX B200 specifications, per-GPU column (https://www.nvidia.com/en-us/data-center/hgx/): FP16/BF16 4.5 PFLOPS* and TF32 2.2 PFLOPS* (sparse, halved), FP32 75 TFLOPS, 180 GB at 7.7 TB/s, NVLink 5 1.8 TB/s both ways, PCIe Gen5; NICs: NVIDIA DGX B200 User Guide (8 x ConnectX-7, up to 400 Gb/s).
// a100-40gb, a100-80gb: "NVIDIA A100 Tensor Core GPU" datasheet, SXM4 columns (https://www.nvidia.com/en-us/data-center/a100/): 19.5 / 156* / 312* / 312* TFLOPS (dense; * the datasheet's dense figure), 1,555 GB/s (40GB) and 2,039 GB/s (80GB SXM), NVLink 600 GB/s both ways, PCIe Gen4; NICs: DGX A100 (8 x ConnectX-6 200 Gb/s HDR).
// v100-16gb, v100-32gb: "NVIDIA Tesla V100 GPU Accelerator" datasheet, V100 SXM2 column (https://www.nvidia.com/en-us/data-center/v100/): 15.7 TFLOPS FP32, 125 TFLOPS tensor (FP16, FP32 accumulate; no TF32, no BF16), 900 GB/s, NVLink 300 GB/s both ways, PCIe Gen3; NICs: "NVIDIA DGX-1 System Architecture" whitepaper (4 x 100 Gb/s EDR InfiniBand for 8 GPUs).
// a10-24gb: "NVIDIA A10 Tensor Core GPU" datasheet (https://www.nvidia.com/en-us/data-center/products/a10-gpu/): 31.2 / 62.5 / 125 / 125 TFLOPS (the datasheet's dense figures), 600 GB/s, PCIe Gen4, no NVLink.
// a10g-24gb: NVIDIA publishes no A10G datasheet; the figures are those Baseten's "NVIDIA A10 vs A10G for ML model inference" gives (https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/): 35 / 35 / 70 / 70 TFLOPS, 600 GB/s; NICs: AWS "Amazon EC2 G5 instances" (g5.48xlarge: 8 A10G, 100 Gbps).
// l4-24gb: "NVIDIA L4 Tensor Core GPU" datasheet (https://www.nvidia.com/en-us/data-center/l4/): 30.3 TFLOPS FP32, TF32 120* / BF16 242* / FP16 242* (sparse, halved), 300 GB/s, PCIe Gen4; NICs: AWS "Amazon EC2 G6 instances" (g6.48xlarge: 8 L4, 100 Gbps).
// l40s-48gb: "NVIDIA L40S" datasheet (https://www.nvidia.com/en-us/data-center/l40s/): 91.6 TFLOPS FP32, TF32 183, BF16 and FP16 362.05 (its dense figures), 864 GB/s, PCIe Gen4; NICs: AWS "Amazon EC2 G6e instances" (g6e.48xlarge: 8 L40S, 400 Gbps).
// t4-16gb: "NVIDIA T4 Tensor Core GPU" datasheet (https://www.nvidia.com/en-us/data-center/tesla-t4/): 8.1 TFLOPS FP32, 65 TFLOPS mixed precision (FP16, FP32 accumulate; no TF32, no BF16), 320 GB/s, PCIe Gen3; NICs: AWS g4dn.12xlarge (4 T4, 50 Gbps).
// rtx3090-24gb: "NVIDIA Ampere GA102 GPU Architecture" whitepaper v2, Appendix A, GeForce RTX 3090 (https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf): 35.6 TFLOPS FP32, TF32 35.6, BF16 71 and FP16 with FP32 accumulate 71 (half the 142 of FP16 accumulate: a GeForce limit), 936 GB/s, NVLink bridge 112.5 GB/s both ways (two cards), PCIe Gen4.
// rtx4090-24gb: "NVIDIA Ada GPU Architecture" whitepaper, GeForce RTX 4090 (https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf): 82.6 TFLOPS FP32, TF32 82.6, BF16 165.2 and FP16 with FP32 accumulate 165.2 (half the 330.3 of FP16 accumulate), 1,008 GB/s, PCIe Gen4, no NVLink.
// rtxa6000-48gb: "NVIDIA RTX A6000" datasheet (https://www.nvidia.com/en-us/design-visualization/rtx-a6000/) and the GA102 whitepaper v2, Appendix C: 38.7 TFLOPS FP32, TF32 77.4, BF16 and FP16 with FP32 accumulate 154.8 (full rate on the professional card; 309.7 is sparse), 768 GB/s, NVLink bridge 112.5 GB/s both ways (two cards), PCIe Gen4.
// mi300x-192gb: "AMD Instinct MI300X Accelerator" data sheet (https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf): matrix FP32 163.4, TF32 653.7, BF16 and FP16 1,307.4 TFLOPS (dense; sparse is twice), 5.3 TB/s, 7 Infinity Fabric links of 128 GB/s both ways (896 GB/s: 448 GB/s one way), PCIe Gen5; NICs: Azure ND MI300X v5 (8 x 400 Gb/s NDR InfiniBand).
// Each speeds row: fp32, tf32, bf16, fp16, memory, intra-node, inter-node, pcie.
const std::vector<GpuSpec>& gpu_catalog() {
  static const std::vector<GpuSpec> catalog = {
      {"h100-80gb", "NVIDIA H100 80GB HBM3 (SXM)", mib(81559),
       {66.9 * kTera, 494.7 * kTera, 989.4 * kTera, 989.4 * kTera, 3.35 * kTera, 450 * kGiga, kNic400PerGpu,
        kPcieGen5}},
      {"h200-141gb", "NVIDIA H200 141GB HBM3e (SXM)", mib(143771),
       {66.9 * kTera, 494.7 * kTera, 989.4 * kTera, 989.4 * kTera, 4.8 * kTera, 450 * kGiga, kNic400PerGpu,
        kPcieGen5}},
      // The vendor's usable figure: 180 GB per GPU of its 192 GB of HBM3e (NVIDIA DGX B200 User
      // Guide, "Introduction to NVIDIA DGX B200 Systems": eight B200 GPUs with 1,440 GB of GPU
      // memory in total). The card reports 183359 MiB (179.06 GiB). Its memory bandwidth is the
      // HGX B200 table's 7.7 TB/s for the 180 GB card (the DGX B200 datasheet's 64 TB/s for eight
      // would be 8 TB/s each).
      {"b200-180gb", "NVIDIA B200 180GB HBM3e (192GB physical; SXM, HGX/DGX B200)", mib(183359),
       {75 * kTera, 1100 * kTera, 2250 * kTera, 2250 * kTera, 7.7 * kTera, 900 * kGiga, kNic400PerGpu, kPcieGen5}},
      {"a100-40gb", "NVIDIA A100 40GB (SXM4)", mib(40960),
       {19.5 * kTera, 156 * kTera, 312 * kTera, 312 * kTera, 1555 * kGiga, 300 * kGiga, 200e9 / 8, kPcieGen4}},
      {"a100-80gb", "NVIDIA A100 80GB (SXM4)", mib(81920),
       {19.5 * kTera, 156 * kTera, 312 * kTera, 312 * kTera, 2039 * kGiga, 300 * kGiga, 200e9 / 8, kPcieGen4}},
      // DGX-1: 4 x 100 Gb/s for 8 GPUs, 50 Gb/s each.
      {"v100-16gb", "NVIDIA Tesla V100 16GB HBM2 (SXM2)", mib(16160),
       {15.7 * kTera, 0, 0, 125 * kTera, 900 * kGiga, 150 * kGiga, 4 * 100e9 / 8 / 8, kPcieGen3}},
      {"v100-32gb", "NVIDIA Tesla V100 32GB HBM2 (SXM2)", mib(32510),
       {15.7 * kTera, 0, 0, 125 * kTera, 900 * kGiga, 150 * kGiga, 4 * 100e9 / 8 / 8, kPcieGen3}},
      {"a10-24gb", "NVIDIA A10 24GB GDDR6", mib(23028),
       {31.2 * kTera, 62.5 * kTera, 125 * kTera, 125 * kTera, 600 * kGiga, kPcieGen4, kNic100Per8Gpus, kPcieGen4}},
      {"a10g-24gb", "NVIDIA A10G 24GB GDDR6 (AWS G5)", mib(23028),
       {35 * kTera, 35 * kTera, 70 * kTera, 70 * kTera, 600 * kGiga, kPcieGen4, kNic100Per8Gpus, kPcieGen4}},
      {"l4-24gb", "NVIDIA L4 24GB", mib(23034),
       {30.3 * kTera, 60 * kTera, 121 * kTera, 121 * kTera, 300 * kGiga, kPcieGen4, kNic100Per8Gpus, kPcieGen4}},
      // g6e.48xlarge: 400 Gbps for 8 cards.
      {"l40s-48gb", "NVIDIA L40S 48GB", mib(46068),
       {91.6 * kTera, 183 * kTera, 362.05 * kTera, 362.05 * kTera, 864 * kGiga, kPcieGen4, 400e9 / 8 / 8,
        kPcieGen4}},
      // g4dn.12xlarge: 50 Gbps for 4 cards.
      {"t4-16gb", "NVIDIA T4 16GB", mib(15360),
       {8.1 * kTera, 0, 0, 65 * kTera, 320 * kGiga, kPcieGen3, 50e9 / 8 / 4, kPcieGen3}},
      // GeForce: FP16 and BF16 with FP32 accumulate at half the FP16-accumulate rate. The NVLink
      // bridge joins two cards: 56.25 GB/s one way to the one peer it has.
      {"rtx3090-24gb", "NVIDIA GeForce RTX 3090 24GB GDDR6X", mib(24576),
       {35.6 * kTera, 35.6 * kTera, 71 * kTera, 71 * kTera, 936 * kGiga, 112.5 * kGiga / 2, kNic100Per8Gpus,
        kPcieGen4}},
      {"rtx4090-24gb", "NVIDIA GeForce RTX 4090 24GB", mib(24564),
       {82.6 * kTera, 82.6 * kTera, 165.2 * kTera, 165.2 * kTera, 1008 * kGiga, kPcieGen4, kNic100Per8Gpus,
        kPcieGen4}},
      {"rtxa6000-48gb", "NVIDIA RTX A6000 48GB GDDR6", mib(49140),
       {38.7 * kTera, 77.4 * kTera, 154.8 * kTera, 154.8 * kTera, 768 * kGiga, 112.5 * kGiga / 2, kNic100Per8Gpus,
        kPcieGen4}},
      // AMD states 192 GB of HBM3; rocm-smi reports 206141652992 bytes. (trainmem runs CUDA only:
      // this sizes estimates; the context allowance stands in for ROCm's.) Its fp32 rate is AMD's
      // matrix FP32 (the vector rate is half of it): the rate rocBLAS's fp32 GEMMs run at.
      {"mi300x-192gb", "AMD Instinct MI300X 192GB HBM3", mib(196592),
       {163.4 * kTera, 653.7 * kTera, 1307.4 * kTera, 1307.4 * kTera, 5.3 * kTera, 7 * 128 * kGiga / 2,
        kNic400PerGpu, kPcieGen5}},
  };
  return catalog;
}

double peak_flops(const GpuSpeeds& speeds, trainmem::DType dtype) {
  switch (dtype) {
    case trainmem::DType::f32:
      return speeds.fp32_flops;
    case trainmem::DType::bf16:
      return speeds.bf16_flops > 0 ? speeds.bf16_flops : speeds.fp32_flops;
    case trainmem::DType::f16:
      return speeds.fp16_flops > 0 ? speeds.fp16_flops : speeds.fp32_flops;
    case trainmem::DType::i32:
    case trainmem::DType::u16:
    case trainmem::DType::i64:
      break;
  }
  throw std::invalid_argument("peak_flops: " + std::string(trainmem::to_string(dtype)) +
                              " is not a floating-point dtype (f32, bf16 or f16)");
}

std::string gpu_names() {
  std::string names;
  for (const GpuSpec& g : gpu_catalog()) {
    if (!names.empty()) names += ", ";
    names += g.name;
  }
  return names;
}

const GpuSpec& find_gpu(const std::string& name) {
  for (const GpuSpec& g : gpu_catalog())
    if (g.name == lower_case(name)) return g;
  // (CLI11 puts "--gpu: " before this: the message does not name the flag again)
  std::vector<std::string> names;
  for (const GpuSpec& g : gpu_catalog()) names.emplace_back(g.name);
  throw std::invalid_argument("must be one of " + gpu_names() + " (any case; or give --device-memory SIZE), not '" +
                              name + "'" + cli::did_you_mean(lower_case(name), names));
}

}  // namespace trainmem::estimator
