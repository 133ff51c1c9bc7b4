"""GPU architectures: what one FP32 lane of each computes a clock, unit by unit.

A kind that states no FP16 matrix figure (``fp16_tflops``) but gives its shaders and clock
may name its ``architecture``; the speed estimate then derives its stand-in from the rate
of the units llama.cpp's kernels reach on it (:func:`planner.performance.settings.
shader_flops_per_lane_clock`) rather than from one factor for every GPU. The rates are per
FP32 lane (a stream processor, a CUDA core, one of an Xe-core's 128 lanes) and clock, as
the vendors' architecture documents give them per compute unit, SM or Xe-core; with a
kind's lanes and boost clock they reproduce the vendor's published peak
(``tests/test_gpu_architectures.py``; docs/sources.md §1 lists the sources).

Apple states no GPU clock: a kind of its that names an architecture computes at its
lanes times its vendor's measured FP16 rate a lane (the vector units'), times the
architecture's matrix units over its vector ones where llama.cpp reaches them (the M5's
Neural Accelerators, ``apple10``, as Apple states them against the M4).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuArchitecture:
    """One GPU architecture's throughput per FP32 lane and clock.

    ``packed_fp16``: FP16 FLOPs of its vector units (2 where FP16 runs at the FP32 rate,
    4 where two FP16 values share a lane); ``int8_dot``: int8 operations of its native
    4-way dot-product instruction (dp4a), ``None`` without one; ``matrix_fp16``: dense
    FP16 FLOPs of its matrix units with FP16 accumulate (tensor cores, WMMA, XMX),
    ``None`` without them; ``vulkan_matrix``: whether llama.cpp's Vulkan backend reaches
    those units through cooperative matrices; ``metal_matrix``: whether its Metal backend
    reaches them (through the Metal 4 tensor API)."""

    name: str
    vendor: str
    packed_fp16: int
    int8_dot: int | None
    matrix_fp16: int | None
    vulkan_matrix: bool
    source: str
    metal_matrix: bool = False


# FLOPs of a fused multiply-add: an FP32 lane's rate a clock.
FMA_FLOPS = 2
# FP16 FLOPs a lane and clock the stand-in takes for a kind that names no architecture:
# a matrix unit's, as AMD's RDNA 3 and NVIDIA's GeForce tensor cores since Ampere compute.
UNSTATED_FLOPS_PER_LANE_CLOCK = 8


def _table(*architectures: GpuArchitecture) -> dict[str, GpuArchitecture]:
    return {architecture.name: architecture for architecture in architectures}


GPU_ARCHITECTURES: dict[str, GpuArchitecture] = _table(
    GpuArchitecture("gcn4", "AMD", 2, None, None, False,
                    "AMD Polaris (GCN 4): FP16 at the FP32 rate, no dot-product or matrix "
                    "instructions (packed FP16 and dot products came with Vega)"),
    GpuArchitecture("rdna1", "AMD", 4, None, None, False,
                    "AMD RDNA whitepaper: packed FP16, 256 FLOPs a clock and compute unit; "
                    "Navi 10 has no 4-way int8 dot product (llama.cpp emulates it)"),
    GpuArchitecture("rdna2", "AMD", 4, 8, None, False,
                    "AMD RDNA 2 ISA: packed FP16 and V_DOT4_I32_I8 (4 int8 multiply-adds a "
                    "lane and clock); no matrix units"),
    GpuArchitecture("rdna3", "AMD", 4, 8, 8, True,
                    "AMD RDNA 3 ISA and GPUOpen: WMMA at 512 FP16 FLOPs a clock and compute "
                    "unit of 64 lanes (RX 7900 XTX: 122.8 TFLOPS)"),
    GpuArchitecture("rdna3.5", "AMD", 4, 8, 8, True,
                    "AMD RDNA 3.5 (Radeon 800M and 8000S): RDNA 3's WMMA units"),
    GpuArchitecture("rdna4", "AMD", 4, 8, 16, True,
                    "AMD RDNA 4: WMMA at 1,024 dense FP16 FLOPs a clock and compute unit, "
                    "twice RDNA 3's (RX 9070 XT: 779 INT8 TOPS with sparsity, FP16 dense a "
                    "quarter of it, 194.6 TFLOPS)"),
    GpuArchitecture("xe-hpg", "Intel", 4, 8, 16, False,
                    "Intel Xe-HPG (Arc A-series): XMX at 2,048 FP16 FLOPs a clock and "
                    "Xe-core (Arc A770: 137.6 TFLOPS at 2.1 GHz), packed FP16 and DP4a on "
                    "the vector engines; llama.cpp's Vulkan backend leaves XMX off on "
                    "discrete Xe-HPG (ggml_vk_khr_cooperative_matrix_support)"),
    GpuArchitecture("xe2", "Intel", 4, 8, 16, True,
                    "Intel Xe2 (Arc B-series): XMX at 2,048 FP16 FLOPs a clock and Xe-core, "
                    "reached by llama.cpp's Vulkan backend"),
    GpuArchitecture("pascal", "NVIDIA", 2, 8, None, False,
                    "NVIDIA Tesla P40 datasheet: 47 INT8 TOPS (dp4a); GP102 runs FP16 at "
                    "1/64 of FP32, so llama.cpp computes FP16 work at the FP32 rate"),
    GpuArchitecture("volta", "NVIDIA", 4, 8, 16, False,
                    "NVIDIA Tesla V100 datasheet: 5,120 CUDA cores, 640 tensor cores, 112 "
                    "FP16 tensor TFLOPS (PCIe); Volta whitepaper: 8 tensor cores an SM of "
                    "64 CUDA cores, 64 FP16 multiply-adds a clock each (1,024 FLOPs a "
                    "clock and SM); no int8 tensor cores (Turing's came after)"),
    GpuArchitecture("turing", "NVIDIA", 4, 8, 16, True,
                    "NVIDIA Turing whitepaper: 8 tensor cores an SM of 64 CUDA cores, "
                    "1,024 FP16 FLOPs a clock and SM (RTX 2080 Ti: 107.6 TFLOPS)"),
    GpuArchitecture("ampere", "NVIDIA", 4, 8, 8, True,
                    "NVIDIA Ampere GA102 whitepaper: 4 tensor cores an SM of 128 CUDA "
                    "cores, 1,024 dense FP16 FLOPs with FP16 accumulate a clock and SM"),
    GpuArchitecture("ada", "NVIDIA", 4, 8, 8, True,
                    "NVIDIA Ada whitepaper: 1,024 dense FP16 FLOPs with FP16 accumulate a "
                    "clock and SM of 128 CUDA cores (RTX 4090: 330.3 TFLOPS)"),
    GpuArchitecture("blackwell", "NVIDIA", 4, 8, 8, True,
                    "NVIDIA Blackwell GeForce whitepaper: 1,024 dense FP16 FLOPs with FP16 "
                    "accumulate a clock and SM of 128 CUDA cores (RTX 5090: 419 TFLOPS)"),
    GpuArchitecture("apple10", "Apple", 2, None, 8, False,
                    "Apple newsroom, 2025-10-15 (M5): a Neural Accelerator in each GPU "
                    "core, over 4x the peak GPU compute for AI of M4, whose GPU runs FP16 "
                    "at its FP32 rate (Metal's Apple10 GPU family: M5 and A19); llama.cpp's "
                    "Metal backend reaches the accelerators through the Metal 4 tensor "
                    "API (pull request 16634, 2025-11-06; ggml-metal-device.m turns it on "
                    "for M5, M6, A19 and A20 only)",
                    metal_matrix=True),
)
