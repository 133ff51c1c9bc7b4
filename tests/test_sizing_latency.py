"""Sizing for latency: a time-to-first-token target for a prompt size, judged by the
calibrated prefill estimate with the one targets check (planner.targets.Targets)."""

from __future__ import annotations

import json

import pytest
from test_cli import assert_user_error, run

from planner.models import load_gpu_catalog, load_preset
from planner.sizing import SizingError, size_fleet
from planner.targets import Targets, TargetsError
from planner.units import format_milliseconds

KINDS = ["h100-sxm-80gb", "a100-80gb", "l40s"]


def test_a_ttft_target_needs_its_prompt_size() -> None:
    with pytest.raises(TargetsError) as error:
        Targets(target_ttft_ms=500)
    assert error.value.details["field"] == "prompt_tokens"
    targets = Targets(target_ttft_ms=500, prompt_tokens=4096)
    assert Targets.from_dict(targets.to_dict()) == targets
    assert targets.estimate_options == {"prompt_tokens": 4096}


def test_every_fleet_returned_meets_the_ttft_target() -> None:
    model, catalog = load_preset("llama-3.1-70b"), load_gpu_catalog()
    loose = size_fleet(model, catalog, Targets(), kinds=KINDS, top=3, pareto=False)
    first = loose.cheapest
    assert first.estimate is not None and first.estimate.ttft_ms is None
    probe = size_fleet(model, catalog, Targets(target_ttft_ms=10**6, prompt_tokens=8192),
                       kinds=KINDS, top=3, pareto=False)
    ttfts = [f.estimate.ttft_ms for f in probe.fleets if f.estimate is not None]
    assert len(ttfts) == 3 and all(t is not None for t in ttfts)
    # A target below the cheapest fleet's time to first token: every fleet found meets it.
    target = int(min(ttfts) * 0.8)
    tight = Targets(target_ttft_ms=target, prompt_tokens=8192)
    result = size_fleet(model, catalog, tight, kinds=KINDS, top=3, pareto=False)
    for fleet in result.fleets:
        assert fleet.estimate is not None and fleet.estimate.ttft_ms is not None
        assert fleet.estimate.ttft_ms <= target
        assert tight.meets(fleet.plan, fleet.estimate)
    assert result.cheapest.cost_per_hour_usd >= probe.cheapest.cost_per_hour_usd



def test_a_fleet_that_misses_only_the_ttft_target_is_named_so() -> None:
    """Where the largest fleet plans but fills the prompt too slowly, the refusal says
    that its TTFT misses (it named only the context and lanes, so a user read it as a
    context shortfall)."""
    model, catalog = load_preset("llama-3.1-70b"), load_gpu_catalog()
    kinds = ["h100-sxm-80gb"]
    probe = size_fleet(model, catalog, Targets(target_ttft_ms=10**6, prompt_tokens=8192),
                       kinds=kinds, top=1, pareto=False)
    fastest = probe.cheapest.estimate
    assert fastest is not None and fastest.ttft_ms is not None
    # Half the cheapest fleet's time: no fleet of this kind fills the prompt so fast.
    target = int(fastest.ttft_ms / 2)
    with pytest.raises(SizingError) as refused:
        size_fleet(model, catalog, Targets(target_ttft_ms=target, prompt_tokens=8192),
                   kinds=kinds, top=1, pareto=False)
    assert refused.value.code == "NoFleetMeetsTargets"
    assert "TTFT" in refused.value.message and format_milliseconds(target) in refused.value.message

def test_planner_size_takes_ttft_and_prompt_tokens() -> None:
    done = run("size", "llama-3.1-70b", "--kinds", ",".join(KINDS), "--ttft-ms", "10000",
               "--prompt-tokens", "8192", "--top", "2", "--json")
    assert done.returncode == 0, done.stderr
    fleets = json.loads(done.stdout)["fleets"]
    assert fleets and all(f["estimated_context_fill_ms"] is not None for f in fleets)
    # The figure the target is judged on is shown, in JSON and in the table.
    assert all(0 < f["estimated_ttft_ms"] <= 10000 for f in fleets)
    table = run("size", "llama-3.1-70b", "--kinds", ",".join(KINDS), "--ttft-ms", "10000",
                "--prompt-tokens", "8192", "--top", "2")
    assert table.returncode == 0, table.stderr
    assert "TTFT <= 10.0 s for a 8,192-token prompt" in table.stdout
    assert "estimated_ttft_ms" in table.stdout
    assert "first token of a 8,192-token prompt in" in table.stdout
    assert_user_error(run("size", "llama-3.1-70b", "--ttft-ms", "5000"), 2, "--prompt-tokens")


def test_the_size_a_fleet_panel_takes_a_ttft_target() -> None:
    from planner.performance import ModelTraffic
    from planner.workbench.sizing_panel import SizingModel, SizingPanel

    model = load_preset("llama-3.1-70b")
    fields = {k: v for k, v in model.planning_fields().items() if v is not None}
    panel = SizingPanel(SizingModel(fields, ModelTraffic.from_spec(model), model.name),
                        compute=False)
    assert panel.targets().target_ttft_ms is None
    panel.ttft.value, panel.prompt_tokens.value = "2000", "8192"
    assert (panel.targets().target_ttft_ms, panel.targets().prompt_tokens) == (2000, 8192)
