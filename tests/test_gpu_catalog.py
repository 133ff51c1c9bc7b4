"""The catalog fields sizing and the speed estimate need, and user catalog files."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.models import GpuModel, ModelError, load_gpu_catalog

ENTRY = ('[[gpu]]\nname = "Card"\nvendor = "V"\nmemory_bytes = 1024\nnote = "n"\n')


def test_every_shipped_kind_has_a_cited_price_and_bandwidth() -> None:
    for gpu in load_gpu_catalog():
        assert gpu.price_per_hour and gpu.price_per_hour > 0, gpu.name
        assert gpu.price_source and gpu.price_date, gpu.name
        assert gpu.memory_bandwidth_bytes_per_s and gpu.memory_bandwidth_source, gpu.name
    kinds = [gpu.kind for gpu in load_gpu_catalog()]
    assert "h100-sxm-80gb" in kinds and len(set(kinds)) == len(kinds)


def test_a_user_catalog_file_loads_with_every_field(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(ENTRY + 'id = "card"\nprice_per_hour = 1.5\nprice_source = "quote"\n'
                    "price_date = 2026-11-30\nmemory_bandwidth_bytes_per_s = 1_000_000\n"
                    'memory_bandwidth_source = "datasheet"\nheadroom_bytes = 24\n'
                    "stage_transfer_latency_ms = 3\nmax_count = 4\n")
    [gpu] = load_gpu_catalog(path)
    assert (gpu.kind, gpu.price_per_hour, gpu.price_date, gpu.headroom_bytes,
            gpu.stage_transfer_latency_ms, gpu.max_count, gpu.usable_bytes) == (
        "card", 1.5, "2026-11-30", 24, 3, 4, 1000)
    assert GpuModel.from_dict(gpu.to_dict()) == gpu


@pytest.mark.parametrize(("extra", "field"), [
    ('price_per_hour = 1.0\n', "price_source"),
    ('price_per_hour = -1.0\nprice_source = "s"\nprice_date = 2026-01-01\n', "price_per_hour"),
    ('price_per_hour = 1.0\nprice_source = "s"\nprice_date = "soon"\n', "price_date"),
    ("memory_bandwidth_bytes_per_s = 5\n", "memory_bandwidth_source"),
    ("max_count = -1\n", "max_count"),
    ("headroom_bytes = 1.5\n", "headroom_bytes"),
    ('id = "Bad Id"\n', "id"),
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
    path = tmp_path / "twice.toml"
    path.write_text(ENTRY + 'id = "x"\n' + ENTRY.replace("Card", "Other") + 'id = "x"\n')
    with pytest.raises(ModelError) as caught:
        load_gpu_catalog(path)
    assert caught.value.details["field"] == "id"
