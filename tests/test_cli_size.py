"""``planner size``, run as a real process."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from test_cli import FIVE, assert_user_error, run

from planner.models import load_gpu_catalog, load_preset
from planner.sizing import SizingTargets, size_fleet

KEYS = ["counts", "nodes", "cost_per_hour", "context_length", "stage_count",
        "parallel_lanes", "estimated_tpot_ms", "estimated_ttft_ms", "tokens_per_s",
        "estimated_context_fill_ms", "cost_per_million_tokens", "failures_tolerated"]
KINDS = "h100-sxm-80gb,a100-80gb,h200-141gb,instinct-mi300x"

CARD = ('[[gpu]]\nname = "Card"\nvendor = "V"\nmemory_bytes = 85899345920\nnote = "n"\n'
        'id = "card"\nprice_per_hour = 1.0\nprice_source = "quote"\nprice_date = 2026-11-30\n'
        "max_count = 3\n")


def test_json_lists_the_cheapest_fleets_with_the_documented_keys() -> None:
    done = run("size", "qwen3-coder-480b-a35b", "--tolerate", "1", "--kinds", KINDS,
               "--top", "3", "--json")
    assert done.returncode == 0, done.stderr
    fleets = json.loads(done.stdout)["fleets"]
    assert len(fleets) == 3 and all(list(fleet) == KEYS for fleet in fleets)
    costs = [fleet["cost_per_hour"] for fleet in fleets]
    assert costs == sorted(costs)
    expected = size_fleet(load_preset("qwen3-coder-480b-a35b"), load_gpu_catalog(),
                          SizingTargets(failures_tolerated=1), kinds=KINDS.split(","),
                          top=3, pareto=False)
    assert fleets == [fleet.to_dict() for fleet in expected.fleets]
    assert fleets[0]["failures_tolerated"] == 1


def test_text_and_csv_say_it_is_an_estimate() -> None:
    text = run("size", "llama-3.1-70b", "--kinds", KINDS, "--top", "2")
    assert text.returncode == 0, text.stderr
    assert "Cheapest at rented prices:" in text.stdout and "estimate" in text.stdout
    assert "; rented prices" in text.stdout and "prices compared: rented" in text.stdout
    assert "Pareto front" in text.stdout
    table = run("size", "llama-3.1-70b", "--kinds", KINDS, "--top", "2", "--csv")
    rows = list(csv.reader(io.StringIO(table.stdout)))
    assert rows[0] == ["fleet", *KEYS[1:]] and len(rows) == 3


def test_a_fleet_file_gives_model_and_planning(tmp_path: Path) -> None:
    catalog = tmp_path / "mine.toml"
    catalog.write_text(CARD.replace("max_count = 3\n", ""))
    done = run("size", FIVE, "--catalog", catalog, "--kinds", "card", "--json")
    assert done.returncode == 0, done.stderr
    best = json.loads(done.stdout)["fleets"][0]
    # 80 GiB cards (README's worked example): 4 plan 65,536, 5 the native 262,144.
    assert best["counts"] == {"card": 4} and best["context_length"] == 65536
    assert best["estimated_tpot_ms"] is None  # the user's card states no bandwidth
    native = run("size", FIVE, "--catalog", catalog, "--kinds", "card", "--min-context",
                 "262144", "--json")
    assert json.loads(native.stdout)["fleets"][0]["counts"] == {"card": 5}


def test_a_preset_is_sized_at_the_size_of_the_file_it_is_run_from(tmp_path: Path) -> None:
    """``planner speed`` took ``--file-size``; ``planner size`` sized the preset's own
    bytes (gpt-oss-20b's 12.82 GiB, not the 11.27 GiB file every benchmark runs)."""
    common = ("--kinds", "rtx-4090", "--top", "1", "--json")

    def best(*args: str | Path) -> dict:
        done = run("size", *args, *common)
        assert done.returncode == 0, done.stderr
        fleet: dict = json.loads(done.stdout)["fleets"][0]
        return fleet

    stored = round(11.27 * 2**30)
    expected = size_fleet(load_preset("gpt-oss-20b").stored_in(stored), load_gpu_catalog(),
                          SizingTargets(), kinds=["rtx-4090"], top=1, pareto=False)
    sized = best("gpt-oss-20b", "--file-size", "11.27GiB")
    assert sized == expected.fleets[0].to_dict()
    assert sized["estimated_tpot_ms"] < best("gpt-oss-20b")["estimated_tpot_ms"]
    fleet = tmp_path / "gpt-oss.toml"
    fleet.write_text('[model]\npreset = "gpt-oss-20b"\nfile_bytes = "11.27 GiB"\n')
    assert best(fleet) == sized
    assert best(fleet, "--file-size", "12.82GiB") == best("gpt-oss-20b", "--file-size",
                                                           "12.82GiB")
    assert_user_error(run("size", "gpt-oss-20b", "--file-size", "1KB"), 2,
                      "--file-size: a file of 1,000 bytes cannot hold gpt-oss-20b")


def test_no_fleet_exits_1_with_the_reason(tmp_path: Path) -> None:
    catalog = tmp_path / "mine.toml"
    catalog.write_text(CARD)
    done = run("size", "qwen3-coder-480b-a35b", "--catalog", catalog, "--kinds", "card")
    assert_user_error(done, 1, "holds 48 of 62 layers at 65,536", "card")


def test_a_catalog_adds_its_kinds_to_the_shipped_ones(tmp_path: Path) -> None:
    """``--catalog`` adds to the shipped kinds, as in every command: the user's card is
    sized beside them, and a kind with a shipped id replaces that one."""
    catalog = tmp_path / "mine.toml"
    catalog.write_text(CARD.replace("max_count = 3\n", "")
                       + CARD.replace('id = "card"', 'id = "h100-sxm-80gb"')
                       .replace('name = "Card"', 'name = "H100 at our provider"')
                       .replace("price_per_hour = 1.0", "price_per_hour = 0.5"))
    done = run("size", FIVE, "--catalog", catalog, "--top", "50", "--json")
    assert done.returncode == 0, done.stderr
    fleets = json.loads(done.stdout)["fleets"]
    kinds = {kind for fleet in fleets for kind in fleet["counts"]}
    assert {"card", "h100-sxm-80gb", "instinct-mi300x"} <= kinds
    # Four 80 GiB cards plan the fleet file's model (above): the replaced H100, at the
    # file's 0.5 a GPU-hour and at most 3, and the added card at 1.0.
    assert fleets[0]["counts"] == {"h100-sxm-80gb": 3, "card": 1}
    assert fleets[0]["cost_per_hour"] == 2.5


def test_bad_input_exits_2(tmp_path: Path) -> None:
    assert_user_error(run("size", "no-such-model"), 2, "UnknownPreset")
    assert_user_error(run("size", "llama-3.1-70b", "--tolerate", "-1"), 2,
                      "--tolerate: must be at least 0")
    assert_user_error(run("size", "llama-3.1-70b", "--kinds", "tpu"), 2,
                      "--kinds: 'tpu' is not in the catalog")
    assert_user_error(run("size", "llama-3.1-70b", "--catalog", tmp_path / "none.toml"), 2,
                      "GpuCatalogNotFound")
    bad = tmp_path / "bad.toml"
    bad.write_text(CARD.replace("price_date = 2026-11-30\n", "price_date = \"soon\"\n"))
    assert_user_error(run("size", "llama-3.1-70b", "--catalog", bad), 2, "price_date")
    assert_user_error(run("size", "llama-3.1-70b", "--min-context", "999999999"), 2,
                      "native context")


def test_sizing_compares_rented_prices_unless_asked_for_owned_and_says_which() -> None:
    """The Apple machines are priced as list price over three years (owned): they are
    not compared with rented GPUs, which they would beat at $0.21 an hour."""
    args = ("size", "qwen3-coder-480b-a35b", "--min-context", "131072", "--tolerate", "1",
            "--json", "--top", "2")
    rented = json.loads(run(*args).stdout)
    apple = {gpu.kind for gpu in load_gpu_catalog() if gpu.vendor == "Apple"}
    assert rented["price_kind"] == "rented"
    assert not apple & {kind for fleet in rented["fleets"] for kind in fleet["counts"]}
    assert any(note.startswith("left out as priced otherwise than rented: m2-ultra")
               for note in rented["notes"])
    owned = json.loads(run(*args, "--prices", "owned").stdout)
    assert owned["price_kind"] == "owned"
    assert {kind for fleet in owned["fleets"] for kind in fleet["counts"]} <= apple
    assert_user_error(run("size", "llama-3.1-70b", "--kinds", "l40s,m3-ultra-512gb"), 2,
                      "OtherPriceKind", "priced as owned", "--prices owned")
    wrong = run("size", "llama-3.1-70b", "--prices", "leased")
    assert wrong.returncode == 2 and "--prices: invalid choice: 'leased'" in wrong.stderr


def test_a_fleet_files_numbers_with_speed_fields_are_sized_by_speed(tmp_path: Path) -> None:
    """A model typed as numbers with the speed fields (hidden_size, parameter_count) has
    its fleets estimated and judged against --tpot, as a preset's are."""
    fleet = tmp_path / "numbers.toml"
    fleet.write_text(
        '[model]\nnative_context_length = 131072\nlayer_count = 80\n'
        'model_weight_bytes = "70 GiB"\nkv_bytes_per_token = 327680\n'
        "hidden_size = 8192\nparameter_count = 70553706496\n\n"
        '[[nodes]]\nid = "gpu"\nvram = "80 GiB"\n')
    done = run("size", fleet, "--kinds", KINDS, "--top", "2", "--tpot", "200", "--json")
    assert done.returncode == 0, done.stderr
    fleets = json.loads(done.stdout)["fleets"]
    assert fleets and all(0 < fleet["estimated_tpot_ms"] <= 200 for fleet in fleets)
    assert all(fleet["estimated_context_fill_ms"] is not None for fleet in fleets)


def test_the_tpot_example_fleet_is_refused_at_once_for_want_of_a_speed_estimate() -> None:
    """The shipped 33 ms example types its model as numbers: sizing it with that target
    is refused by name (it used to search for over 20 minutes, to 9.7 GB)."""
    from planner.fleet import example_fleet

    done = run("size", example_fleet("qwen480b-4x80-latency10-tpot33"))
    assert_user_error(done, 2, "TpotNotEstimable", "typed as numbers")


def test_token_counts_are_written_as_every_command_takes_them() -> None:
    """`planner speed --context 32k` and `planner memory --context 32k` took a count of
    tokens as "32768", "32,768" or "32k"; `planner size --min-context 32k` stopped at an
    argparse usage error ("invalid int value: '32k'"), and so did its --prompt-tokens.
    Each now reads every spelling, and names the option where it cannot."""
    base = ("size", "llama-3.1-8b", "--kinds", "rtx-4090,h100-sxm-80gb", "--top", "2",
            "--json")
    plain = run(*base, "--min-context", "32768", "--ttft-ms", "5000",
                "--prompt-tokens", "8192")
    assert plain.returncode == 0, plain.stderr
    for context, prompt in (("32k", "8k"), ("32,768", "8,192")):
        spelled = run(*base, "--min-context", context, "--ttft-ms", "5000",
                      "--prompt-tokens", prompt)
        assert spelled.returncode == 0, spelled.stderr
        assert json.loads(spelled.stdout) == json.loads(plain.stdout)
    assert_user_error(run(*base, "--min-context", "ten"), 2,
                      "planner: --min-context: cannot read 'ten' as a context length")
    assert_user_error(run(*base, "--ttft-ms", "5000", "--prompt-tokens=-8k"), 2,
                      "planner: --prompt-tokens: cannot be negative")


@pytest.mark.parametrize(("options", "said"), [
    (("--tpot", "0"), "planner: --tpot: must be at least 1 (got 0)"),
    (("--min-lanes", "0"), "planner: --min-lanes: must be at least 1 (got 0)"),
    (("--tolerate", "99"), "planner: --tolerate: must be at most 16 (got 99)"),
    (("--top", "0"), "planner: --top: must be at least 1 (got 0)"),
    (("--ttft-ms", "0", "--prompt-tokens", "8k"), "planner: --ttft-ms: must be at least 1"),
    (("--ttft-ms", "500"), "planner: --ttft-ms and --prompt-tokens go together"),
    (("--prompt-tokens", "8k"), "planner: --ttft-ms and --prompt-tokens go together"),
])
def test_a_target_out_of_range_is_named_by_its_option(options: tuple[str, ...],
                                                      said: str) -> None:
    """`planner size llama-3.1-8b --tpot 0` said `InvalidTargets: target_decode_tpot_ms:
    must be at least 1`, a name the user never typed; every other command names its
    option."""
    result = run("size", "llama-3.1-8b", *options)
    assert_user_error(result, 2, said)
    assert "InvalidTargets" not in result.stderr


def test_a_fleet_files_own_target_is_named_as_the_file_names_it(tmp_path: Path) -> None:
    """A TPOT target out of range in a fleet file is the file's, not --tpot's."""
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[model]\npreset = "llama-3.1-8b"\n\n[planning]\n'
                     'target_decode_tpot_ms = 0\n\n[[nodes]]\nid = "n"\nvram = "80 GiB"\n')
    result = run("size", str(fleet))
    assert result.returncode == 2 and "--tpot" not in result.stderr
    assert "target_decode_tpot_ms" in result.stderr
