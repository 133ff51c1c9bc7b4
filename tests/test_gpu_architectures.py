"""GPU architectures: their rates a lane and clock, the units llama.cpp reaches on each
backend, and what the speed estimate's stand-in from shaders makes of them."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from planner.models import GpuModel, ModelError
from planner.models.architectures import GPU_ARCHITECTURES, UNSTATED_FLOPS_PER_LANE_CLOCK
from planner.performance import NodeSpeed, RunSettings, calibrated_device, load_calibration
from planner.performance.device import matrix_tflops
from planner.performance.settings import shader_flops_per_lane_clock

ROOT = Path(__file__).resolve().parents[1]

# Published peaks, each from its vendor's page or whitepaper: a GPU of the architecture,
# its FP32 lanes and boost clock, the unit, and the vendor's dense figure in T(FL)OPS.
PUBLISHED = [
    ("rdna3", "AMD Radeon RX 7900 XTX", 6144, 2500, "matrix_fp16", 122.8),
    ("rdna4", "AMD Radeon RX 9070 XT", 4096, 2970, "matrix_fp16", 194.6),
    ("rdna2", "AMD Radeon RX 6800 XT", 4608, 2250, "packed_fp16", 41.47),
    ("rdna1", "AMD Radeon RX 5700 XT", 2560, 1905, "packed_fp16", 19.5),
    ("gcn4", "AMD Radeon RX 580", 2304, 1340, "packed_fp16", 6.17),
    ("xe-hpg", "Intel Arc A770 (32 Xe-cores)", 32 * 128, 2100, "matrix_fp16", 137.6),
    ("pascal", "NVIDIA Tesla P40 (INT8 TOPS)", 3840, 1531, "int8_dot", 47.0),
    ("volta", "NVIDIA Tesla V100 PCIe", 5120, 1380, "matrix_fp16", 112.0),
    ("turing", "NVIDIA GeForce RTX 2080 Ti", 4352, 1545, "matrix_fp16", 107.6),
    ("ampere", "NVIDIA GeForce RTX 3090", 10496, 1695, "matrix_fp16", 142.0),
    ("ada", "NVIDIA GeForce RTX 4090", 16384, 2520, "matrix_fp16", 330.3),
    ("blackwell", "NVIDIA GeForce RTX 5090", 21760, 2407, "matrix_fp16", 419.0),
]


@pytest.mark.parametrize(("name", "gpu", "lanes", "clock_mhz", "unit", "published"), PUBLISHED)
def test_an_architecture_s_rate_gives_its_vendor_s_published_peak(
        name: str, gpu: str, lanes: int, clock_mhz: int, unit: str, published: float) -> None:
    rate = getattr(GPU_ARCHITECTURES[name], unit)
    assert rate is not None, (name, unit)
    assert lanes * clock_mhz * 1e6 * rate / 1e12 == pytest.approx(published, rel=0.01), gpu


def test_the_m5_computes_apple_s_stated_multiple_of_the_m4_on_its_accelerators() -> None:
    """Apple states no clock, so an Apple kind computes at its lanes times its vendor's
    measured rate a lane (the vector units'); the M5's Neural Accelerators (``apple10``)
    compute "over 4x the peak GPU compute for AI" of the M4, whose GPU runs FP16 at its
    FP32 rate: on Metal, which reaches them, four times the same lanes without them."""
    m5 = GPU_ARCHITECTURES["apple10"]
    assert m5.matrix_fp16 is not None and m5.matrix_fp16 / m5.packed_fp16 == 4
    calibration = load_calibration()
    lanes = GpuModel(id="m5", name="M5", vendor="Apple", memory_bytes=16 * 2**30,
                     memory_bandwidth_bytes_per_s=153 * 10**9, backend="metal",
                     memory_type="lpddr", shader_count=10, architecture="apple10")
    plain = replace(lanes, architecture=None)
    rate = calibration.fallback_gflops_per_lane["Apple"]
    assert matrix_tflops(NodeSpeed.of_kind("m5", plain), calibration, "metal", True) == (
        pytest.approx((10 * 128 * rate / 1e3, "lanes")))
    for backend, times in (("metal", 4), ("vulkan", 1)):
        assert matrix_tflops(NodeSpeed.of_kind("m5", lanes), calibration, backend, True) == (
            pytest.approx((times * 10 * 128 * rate / 1e3, "lanes")))
        notes: list[str] = []
        calibrated_device(calibration, NodeSpeed.of_kind("m5", lanes),
                          RunSettings(backend=backend), True, notes)
        said = [note for note in notes if "apple10 matrix units" in note]
        assert said == (["m5's apple10 matrix units, which the metal backend reaches, "
                         "compute 4 times its lanes' vector rate"] if times == 4 else [])


def test_rdna_3_5_has_rdna_3_s_units() -> None:
    same = replace(GPU_ARCHITECTURES["rdna3.5"], name="rdna3",
                   source=GPU_ARCHITECTURES["rdna3"].source)
    assert same == GPU_ARCHITECTURES["rdna3"]


@pytest.mark.parametrize(("name", "backend", "quantized", "rate"), [
    ("rdna2", "rocm", True, 8),      # MMQ on its dp4a
    ("rdna2", "rocm", False, 4),     # F16 weights: packed FP16
    ("rdna2", "vulkan", True, 4),    # no cooperative matrices, no dp4a reached
    ("rdna3", "rocm", True, 8),
    ("rdna3", "vulkan", True, 8),
    ("rdna4", "vulkan", True, 16),
    ("rdna4", "rocm", False, 16),
    ("xe-hpg", "vulkan", True, 4),   # XMX left off on discrete Xe-HPG
    ("xe2", "vulkan", True, 16),
    ("pascal", "cuda", True, 8),     # MMQ on dp4a
    ("pascal", "cuda", False, 2),    # FP16 at 1/64: FP32
    ("gcn4", "vulkan", True, 2),
    ("ampere", "sycl", True, 4),     # other backends: the vector units
    ("apple10", "metal", True, 8),   # the M5's Neural Accelerators, through Metal 4
    ("apple10", "vulkan", True, 2),  # not through MoltenVK's cooperative matrices
])
def test_the_units_llama_cpp_reaches_on_each_backend(name: str, backend: str,
                                                     quantized: bool, rate: int) -> None:
    assert shader_flops_per_lane_clock(GPU_ARCHITECTURES[name], backend, quantized) == rate


def _speed(architecture: str | None) -> NodeSpeed:
    return NodeSpeed("card", 640 * 10**9, None, "card", "gddr", "vulkan", None,
                     24.0, "AMD", architecture)


def test_the_stand_in_follows_the_architecture_s_units() -> None:
    """RDNA 4's matrix units compute twice RDNA 3's a lane and clock, so the same shaders
    and clock compute twice as fast; a kind naming no architecture is taken at 8 FLOPs
    (RDNA 3's) and the estimate says so."""
    calibration = load_calibration()
    rdna3, figure = matrix_tflops(_speed("rdna3"), calibration, "vulkan", True)
    rdna4, _ = matrix_tflops(_speed("rdna4"), calibration, "vulkan", True)
    unstated, _ = matrix_tflops(_speed(None), calibration, "vulkan", True)
    assert figure == "shaders"
    assert rdna4 == pytest.approx(2 * rdna3)
    assert GPU_ARCHITECTURES["rdna3"].matrix_fp16 == UNSTATED_FLOPS_PER_LANE_CLOCK
    assert unstated == pytest.approx(rdna3)
    assert rdna3 == pytest.approx(24.0 / 2 * 8 * calibration.shader_units_factor)

    def notes(architecture: str | None) -> list[str]:
        said: list[str] = []
        calibrated_device(calibration, _speed(architecture), RunSettings(), True, said)
        return said

    assert any("states no architecture" in note for note in notes(None))
    assert not any("states no architecture" in note for note in notes("rdna3"))
    # The run's backend decides the units, not the kind's own: RDNA 2 reaches its dp4a
    # on ROCm only.
    rdna2_vulkan = calibrated_device(calibration, _speed("rdna2"), RunSettings(), True, [])
    rdna2_rocm = calibrated_device(calibration, _speed("rdna2"),
                                   RunSettings(backend="rocm"), True, [])
    vulkan_products = rdna2_vulkan.rates.matrix_ms_per_flop * (
        calibration.backends["vulkan"].matrix_efficiency or 0)
    rocm_products = rdna2_rocm.rates.matrix_ms_per_flop * (
        calibration.backends["rocm"].matrix_efficiency or 0)
    vulkan_factor = calibration.backends["vulkan"].quantized_matrix_factor
    rocm_factor = calibration.backends["rocm"].quantized_matrix_factor
    assert vulkan_products * vulkan_factor == pytest.approx(2 * rocm_products * rocm_factor)


def test_a_gpu_whose_matrix_units_are_not_reached_attends_on_its_shaders() -> None:
    """Flash attention runs on the shaders of a GPU whose matrix units the backend does
    not reach, on any build (RDNA 2 on Vulkan or ROCm, Xe-HPG on Vulkan): at its FP32 rate.
    An RDNA 3 card on a current build attends at its stand-in, as its products compute."""
    calibration = load_calibration()

    def attention(architecture: str, backend: str = "vulkan") -> float:
        settings = RunSettings(backend=backend, flash_attn=True, build=None)
        device = calibrated_device(calibration, _speed(architecture), settings, True, [])
        return float(device.rates.attention_ms_per_flop)

    for backend in ("vulkan", "rocm"):
        share = calibration.backends[backend].attention_efficiency or 0.0
        assert attention("rdna2", backend) == pytest.approx(1000 / (share * 24e12))
    share = calibration.backends["vulkan"].attention_efficiency or 0.0
    stand_in, _ = matrix_tflops(_speed("rdna3"), calibration, "vulkan", True)
    assert attention("rdna3") == pytest.approx(1000 / (share * stand_in * 1e12))
    assert attention("xe-hpg") == pytest.approx(1000 / (share * 24e12))


_BASE = {"name": "Card", "vendor": "AMD", "memory_bytes": 16 * 2**30,
         "shader_count": 4096, "boost_clock_mhz": 2970, "shader_source": "page"}


@pytest.mark.parametrize(("extra", "problem"), [
    ({"architecture": "rdna9"}, "architecture must be one of"),
    ({"architecture": "ada"}, "architecture is NVIDIA's, not AMD's"),
    ({"architecture": "rdna4", "shader_count": None, "shader_source": None,
      "boost_clock_mhz": None}, "architecture is given without shader_count"),
])
def test_a_wrong_architecture_is_refused_by_name(extra: dict[str, object],
                                                 problem: str) -> None:
    entry = {key: value for key, value in {**_BASE, **extra}.items() if value is not None}
    with pytest.raises(ModelError) as caught:
        GpuModel.from_dict(entry)
    assert caught.value.code == "InvalidGpuCatalog"
    assert problem in str(caught.value)
    assert caught.value.details["field"] == "architecture"


def test_a_catalog_file_names_an_architecture(tmp_path: Path) -> None:
    from planner.models import load_gpu_catalog

    path = tmp_path / "mine.toml"
    path.write_text('[[gpu]]\nname = "My RX 9070 XT"\nvendor = "AMD"\nmemory = "16 GiB"\n'
                    'shader_count = 4096\nboost_clock_mhz = 2970\nshader_source = "page"\n'
                    'architecture = "rdna4"\n')
    (gpu,) = load_gpu_catalog(path)
    assert gpu.architecture == "rdna4"
    assert GpuModel.from_dict(gpu.to_dict()) == gpu


def test_an_earlier_file_s_factor_on_the_fp32_rate_is_read_re_expressed() -> None:
    """A calibration file written before the stand-in followed the architecture gives
    ``fallback_matrix_factor``, a multiple of the shaders' FP32 rate: it is read as the
    same throughput for a kind naming no architecture, and a value that is no number is
    refused by name."""
    from planner.performance import PerformanceError, SpeedCalibration

    data = load_calibration().to_dict()
    del data["shared"]["shader_units_factor"]
    data["shared"]["fallback_matrix_factor"] = 2.0
    earlier = SpeedCalibration.from_dict(data)
    assert earlier.shader_units_factor == pytest.approx(2.0 * 2 / 8)
    tflops, _ = matrix_tflops(_speed(None), earlier, "vulkan", True)
    assert tflops == pytest.approx(24.0 * 2.0)  # the FP32 rate x the old factor
    data["shared"]["fallback_matrix_factor"] = "fast"
    with pytest.raises(PerformanceError) as raised:
        SpeedCalibration.from_dict(data)
    assert raised.value.code == "InvalidCalibration"
    assert raised.value.details["field"] == "shared.fallback_matrix_factor"


def architectures_table() -> str:
    """The architectures as docs/sources.md §1 lists them."""
    lines = ["| architecture | vendor | packed FP16 | int8 dot | matrix FP16 | "
             "Vulkan reaches matrix | Metal reaches matrix | source |",
             "|---|---|---:|---:|---:|---|---|---|"]
    for a in GPU_ARCHITECTURES.values():
        def shown(rate: int | None) -> str:
            return "" if rate is None else str(rate)
        lines.append(f"| `{a.name}` | {a.vendor} | {a.packed_fp16} | {shown(a.int8_dot)} | "
                     f"{shown(a.matrix_fp16)} | {'yes' if a.vulkan_matrix else 'no'} | "
                     f"{'yes' if a.metal_matrix else 'no'} | {a.source} |")
    return "\n".join(lines)


def test_the_sources_page_lists_every_architecture_as_the_code_does() -> None:
    text = (ROOT / "docs" / "sources.md").read_text()
    found = re.search(r"<!-- gpu-architectures:start -->\n(.*?)\n<!-- gpu-architectures:end -->",
                      text, re.S)
    assert found, "docs/sources.md has no architectures table"
    assert found.group(1) == architectures_table()


if __name__ == "__main__":
    print(architectures_table())
