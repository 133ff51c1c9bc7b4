"""The catalog fields sizing and the speed estimate need, and user catalog files."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from planner.models import GpuModel, ModelError, data_dir, load_gpu_catalog

ENTRY = ('[[gpu]]\nname = "Card"\nvendor = "V"\nmemory_bytes = 1024\nnote = "n"\n')


def test_every_shipped_kind_has_a_cited_price_and_bandwidth() -> None:
    """A user's file may leave the sources out; the shipped catalog never does, and says
    of every price whether it is rented or owned."""
    raw = tomllib.loads((data_dir() / "gpus.toml").read_text(encoding="utf-8"))["gpu"]
    for entry, gpu in zip(raw, load_gpu_catalog(), strict=True):
        assert gpu.vendor and gpu.note, gpu.name
        assert gpu.price_per_hour and gpu.price_per_hour > 0, gpu.name
        assert gpu.price_source and gpu.price_date, gpu.name
        assert entry["price_kind"] == ("owned" if gpu.vendor == "Apple" else "rented")
        assert gpu.memory_bandwidth_bytes_per_s and gpu.memory_bandwidth_source, gpu.name
        # The speed estimate's figures: every kind's memory type, and a stated source for
        # every FP16 throughput given.
        assert gpu.memory_type in ("hbm", "gddr", "lpddr"), gpu.name
        assert (gpu.fp16_tflops is None) == (gpu.fp16_tflops_source is None), gpu.name
    kinds = [gpu.kind for gpu in load_gpu_catalog()]
    assert "h100-sxm-80gb" in kinds and len(set(kinds)) == len(kinds)


def test_the_h100_sxm_and_pcie_cards_are_separate_kinds() -> None:
    catalog = {gpu.kind: gpu for gpu in load_gpu_catalog()}
    sxm, pcie = catalog["h100-sxm-80gb"], catalog["h100-pcie-80gb"]
    assert sxm.memory_bytes == pcie.memory_bytes == 81_559 * 2**20
    assert sxm.memory_bandwidth_bytes_per_s == 3_350_000_000_000
    assert pcie.memory_bandwidth_bytes_per_s == 2_000_000_000_000
    assert "PCIe" in pcie.memory_bandwidth_source and "datasheet" in sxm.memory_bandwidth_source


def test_a_users_catalog_needs_only_a_name_memory_and_a_price(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('[[gpu]]\nname = "H100 at our provider"\nmemory = "80 GiB"\n'
                    "price_per_hour = 2.10\n\n"
                    '[[gpu]]\nname = "Lab card"\nmemory_bytes = 1.0e12\n'
                    'memory_bandwidth = "3.35 TB/s"\n\n'
                    '[[gpu]]\nname = "Old card"\nmemory = "24 GB"\n'
                    "memory_bandwidth_bytes_per_s = 9.36e11\nheadroom = \"1.5 GiB\"\n"
                    'price_per_hour = 0.5\nprice_kind = "owned"\n'
                    'stage_transfer_latency_ms = "500 us"\n')
    rented, lab, old = load_gpu_catalog(path)
    assert (rented.kind, rented.memory_bytes, rented.price_per_hour, rented.price_kind) == (
        "h100-at-our-provider", 80 * 2**30, 2.10, "rented")
    assert rented.vendor is None and rented.price_source is None
    assert (lab.memory_bytes, lab.memory_bandwidth_bytes_per_s, lab.price_kind) == (
        10**12, 3_350_000_000_000, None)
    assert (old.memory_bytes, old.memory_bandwidth_bytes_per_s, old.headroom_bytes,
            old.price_kind, old.stage_transfer_latency_ms) == (
        24 * 10**9, 936 * 10**9, 3 * 2**29, "owned", 0.5)
    for gpu in (rented, lab, old):
        assert GpuModel.from_dict(gpu.to_dict()) == gpu


def test_a_kind_is_checked_however_it_is_made() -> None:
    gpu = GpuModel("Card", 2**30, price_per_hour=1)
    assert gpu.price_kind == "rented" and gpu.price_per_hour == 1.0
    for make in (lambda: GpuModel("Card", -1), lambda: replace(gpu, price_per_hour=0),
                 lambda: replace(gpu, price_kind="leased"),
                 lambda: GpuModel("Card", 2**30, price_source="quote"),
                 lambda: replace(gpu, memory_bandwidth_bytes_per_s="fast")):
        with pytest.raises(ModelError) as caught:
            make()
        assert caught.value.code == "InvalidGpuCatalog"
        assert caught.value.message.startswith("GpuModel: ")


def test_a_user_catalog_file_loads_with_every_field(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(ENTRY + 'id = "card"\nprice_per_hour = 1.5\nprice_source = "quote"\n'
                    "price_date = 2026-11-30\nmemory_bandwidth_bytes_per_s = 1_000_000_000\n"
                    'memory_bandwidth_source = "datasheet"\nheadroom_bytes = 24\n'
                    "stage_transfer_latency_ms = 3\nmax_count = 4\n"
                    'memory_type = "gddr"\nfp16_tflops = 82.5\nfp16_tflops_source = "paper"\n'
                    'shader_count = 4096\nboost_clock_mhz = 2500\nshader_source = "page"\n')
    [gpu] = load_gpu_catalog(path)
    assert (gpu.kind, gpu.price_per_hour, gpu.price_date, gpu.headroom_bytes,
            gpu.stage_transfer_latency_ms, gpu.max_count, gpu.usable_bytes) == (
        "card", 1.5, "2026-11-30", 24, 3, 4, 1000)
    assert (gpu.memory_type, gpu.fp16_tflops) == ("gddr", 82.5)
    # Vendor "V" counts its shaders in no way the package knows: no vector rate from them.
    assert gpu.shader_count == 4096 and gpu.vector_tflops is None
    amd = GpuModel.from_dict({**gpu.to_dict(), "vendor": "AMD"})
    assert amd.vector_tflops == pytest.approx(2 * 4096 * 2.5e9 / 1e12)
    assert GpuModel.from_dict(gpu.to_dict()) == gpu


@pytest.mark.parametrize(("extra", "field"), [
    ('price_source = "quote"\n', "price_source"),
    ('price_per_hour = 1.0\nprice_kind = "leased"\n', "price_kind"),
    ("price_per_hour = 1e-300\n", "price_per_hour"),
    ("price_per_hour = inf\n", "price_per_hour"),
    ('price_per_hour = -1.0\nprice_source = "s"\nprice_date = 2026-01-01\n', "price_per_hour"),
    ('price_per_hour = 1.0\nprice_source = "s"\nprice_date = "soon"\n', "price_date"),
    ('memory_bandwidth_source = "datasheet"\n', "memory_bandwidth_source"),
    ('memory_bandwidth = "3.35"\n', "memory_bandwidth"),
    ('memory_bandwidth = "3.35 Tb/s"\n', "memory_bandwidth"),
    ('memory = "80 GiB"\n', "memory"),
    ("max_count = -1\n", "max_count"),
    ("headroom_bytes = 1.5\n", "headroom_bytes"),
    ('id = "Bad Id"\n', "id"),
    ('memory_type = "sram"\n', "memory_type"),
    ('fp16_tflops_source = "paper"\n', "fp16_tflops_source"),
    ('fp16_tflops = 0\nfp16_tflops_source = "s"\n', "fp16_tflops"),
    ('fp16_tflops = 1e-300\nfp16_tflops_source = "s"\n', "fp16_tflops"),
    ("memory_bandwidth_bytes_per_s = 1\n", "memory_bandwidth_bytes_per_s"),
    ('shader_count = 4096\nboost_clock_mhz = 0.5\nshader_source = "s"\n', "boost_clock_mhz"),
    ('memory_type = "ddr"\ncore_count = 8\nsimd_width_bits = 8\ncore_source = "s"\n',
     "simd_width_bits"),
    ("colour = 1\n", "colour"),
])
def test_bad_entries_name_the_field(tmp_path: Path, extra: str, field: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(ENTRY + extra)
    with pytest.raises(ModelError) as caught:
        load_gpu_catalog(path)
    assert caught.value.code == "InvalidGpuCatalog"
    assert caught.value.details["field"] == field
    assert "#1" in caught.value.message


def test_missing_file_and_clashing_kind_ids(tmp_path: Path) -> None:
    with pytest.raises(ModelError) as caught:
        load_gpu_catalog(tmp_path / "none.toml")
    assert caught.value.code == "GpuCatalogNotFound"
    assert caught.value.message.endswith("none.toml does not exist")
    # A folder or a device exists, and is said to be what it is.
    for where, said in ((tmp_path, "is a folder, not a catalog file"),
                        (Path("/dev/zero"), "is not a regular file")):
        with pytest.raises(ModelError) as caught:
            load_gpu_catalog(where)
        assert caught.value.code == "GpuCatalogNotFound"
        assert caught.value.message == f"GPU catalog {where} {said}"
    path = tmp_path / "twice.toml"
    path.write_text(ENTRY + 'id = "x"\n' + ENTRY.replace("Card", "Other") + 'id = "x"\n')
    with pytest.raises(ModelError) as caught:
        load_gpu_catalog(path)
    assert caught.value.details["field"] == "id"
    assert "'x' is the kind id of two entries ('Card' and 'Other')" in caught.value.message


def test_an_entry_needs_its_memory(tmp_path: Path) -> None:
    for text, field in (('[[gpu]]\nname = "Card"\n', "memory (or memory_bytes)"),
                        ('[[gpu]]\nname = "Card"\nmemory = "80"\n', "memory")):
        path = tmp_path / "bad.toml"
        path.write_text(text)
        with pytest.raises(ModelError) as caught:
            load_gpu_catalog(path)
        assert caught.value.details["field"] == field, caught.value.message


# -- catalog-wide failure defaults ---------------------------------------------------------

DEFAULTS = "[defaults]\nannual_failure_rate = 0.05\nrepair_hours = 24\n\n"


def test_a_kind_without_failure_figures_gets_the_catalogs_defaults(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(DEFAULTS + ENTRY + ENTRY.replace("Card", "Desk card")
                    + "repair_hours = 168\n")
    card, desk = load_gpu_catalog(path)
    assert (card.annual_failure_rate, card.repair_hours) == (0.05, 24.0)
    assert (desk.annual_failure_rate, desk.repair_hours) == (0.05, 168.0)
    # Without [defaults] a kind states what it states, as before.
    path.write_text(ENTRY)
    [bare] = load_gpu_catalog(path)
    assert (bare.annual_failure_rate, bare.repair_hours) == (None, None)


def test_the_shipped_catalog_states_its_failure_defaults_once() -> None:
    """Every shipped kind has both figures, and none repeats the catalog's default."""
    raw = tomllib.loads((data_dir() / "gpus.toml").read_text(encoding="utf-8"))
    defaults = raw["defaults"]
    assert defaults == {"annual_failure_rate": 0.119, "repair_hours": 72}
    repeated = [(entry["name"], key) for entry in raw["gpu"] for key in defaults
                if entry.get(key) == defaults[key]]
    assert repeated == []
    catalog = {gpu.kind: gpu for gpu in load_gpu_catalog()}
    assert all(gpu.annual_failure_rate == 0.119 for gpu in catalog.values())
    assert catalog["h100-sxm-80gb"].repair_hours == 72.0
    assert catalog["rtx-4090"].repair_hours == 168.0


def test_the_shipped_defaults_are_the_availability_defaults() -> None:
    """A node of no known kind gets the same figures as a shipped kind stating none."""
    from planner.availability import DEFAULT_ANNUAL_FAILURE_RATE, DEFAULT_REPAIR_HOURS

    raw = tomllib.loads((data_dir() / "gpus.toml").read_text(encoding="utf-8"))
    assert raw["defaults"] == {"annual_failure_rate": DEFAULT_ANNUAL_FAILURE_RATE,
                               "repair_hours": DEFAULT_REPAIR_HOURS}


def test_a_users_failure_defaults_replace_the_shipped_ones(tmp_path: Path) -> None:
    from planner.availability import fleet_figures
    from planner.planning import NodeBudget

    path = tmp_path / "mine.toml"
    path.write_text("[defaults]\nannual_failure_rate = 0.3\n\n" + ENTRY + 'id = "card"\n'
                    "repair_hours = 10\n")
    catalog = load_gpu_catalog(path)
    assert (catalog[0].annual_failure_rate, catalog[0].repair_hours) == (0.3, 10.0)
    [figures] = fleet_figures([NodeBudget("card-00", 1024)], catalog=catalog).values()
    assert (figures.reliability.annual_failure_rate, figures.annual_failure_rate_source) == (
        0.3, "catalog: card")


@pytest.mark.parametrize(("table", "field"), [
    ("[defaults]\nannual_failure_rate = -0.1\n", "defaults.annual_failure_rate"),
    ("[defaults]\nrepair_hours = nan\n", "defaults.repair_hours"),
    ('[defaults]\nrepair_hours = "a week"\n', "defaults.repair_hours"),
    ("[defaults]\nprice_per_hour = 1.0\n", "defaults.price_per_hour"),
    ('defaults = "0.119"\n', "defaults"),
])
def test_a_bad_default_is_refused_by_name(tmp_path: Path, table: str, field: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(table + "\n" + ENTRY)
    with pytest.raises(ModelError) as caught:
        load_gpu_catalog(path)
    assert caught.value.code == "InvalidGpuCatalog"
    assert caught.value.details["field"] == field
    assert str(path) in caught.value.message and field in caught.value.message


@pytest.mark.parametrize(("vendor", "backend"), [("NVIDIA", "rocm"), ("AMD", "cuda"),
                                                 ("Intel", "metal"), ("Apple", "sycl")])
def test_a_kind_whose_backend_does_not_run_on_its_vendors_gpus_is_refused(
        tmp_path: Path, vendor: str, backend: str) -> None:
    """A catalog kind stating a backend its vendor's GPUs do not run (an NVIDIA card on
    ROCm) was read, and its estimates were of a run that cannot happen; it is refused,
    naming the field. A CPU kind's own backend, cpu, runs on any vendor's CPU."""
    path = tmp_path / "mine.toml"
    path.write_text(f'[[gpu]]\nid = "card"\nname = "A card"\nvendor = "{vendor}"\n'
                    f'memory = "16 GiB"\nbackend = "{backend}"\n')
    with pytest.raises(ModelError) as caught:
        load_gpu_catalog(path)
    assert caught.value.details["field"] == "backend"
    assert f"{backend} backend runs on" in caught.value.message
    path.write_text(f'[[gpu]]\nid = "cores"\nname = "Some cores"\nvendor = "{vendor}"\n'
                    'memory = "16 GiB"\nbackend = "cpu"\n')
    assert load_gpu_catalog(path)[0].backend == "cpu"
