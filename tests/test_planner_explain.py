"""The explanation of the latency-aware choice, on numbers worked by hand."""

from __future__ import annotations

from typing import Any

import pytest

from planner.errors import PlanError
from planner.planning import explain_choice

GIB = 2**30


def _qwen(latency: float | None, target: int | None = None, count: int = 5) -> dict[str, Any]:
    return {"native_context_length": 262144, "layer_count": 62,
            "model_weight_bytes": 315_680_000_000, "kv_bytes_per_token": 131072,
            "target_decode_tpot_ms": target,
            "nodes": [{"node_id": f"gpu-{i}", "detected_vram_bytes": 80 * GIB,
                       "stage_transfer_latency_ms": latency} for i in range(count)]}


# Qwen3-Coder-480B: a layer weighs ceil(315,680,000,000 / 62) = 5,091,612,904 B and its KV
# takes ceil(131,072 / 62) = 2,115 B per token. An 80 GiB node (85,899,345,920 B) holds
#   at  65,536: 5,091,612,904 + 138,608,640 = 5,230,221,544 B a layer -> 16 layers,
#   at 131,072: 5,091,612,904 + 277,217,280 = 5,368,830,184 B a layer -> 15 layers,
#   at 262,144: 5,091,612,904 + 554,434,560 = 5,646,047,464 B a layer -> 15 layers.
# 62 layers need 4 nodes at 65,536 (64 >= 62) and 5 at the higher contexts (60 < 62).
# At 5 ms a node: 4 stages cost 20 ms, 5 stages 25 ms.


def test_five_nodes_at_five_ms_explain_the_lower_context() -> None:
    explained = explain_choice(_qwen(5))
    assert explained.latency_aware
    chosen = explained.chosen
    assert (chosen.context_length, chosen.stage_count, chosen.parallel_lanes) == (65536, 4, 4)
    assert chosen.estimated_decode_network_ms_per_token == 20
    assert chosen.decode_tpot_target_met is None
    assert chosen.node_ids == ("gpu-0", "gpu-1", "gpu-2", "gpu-3")
    assert [item.reason for item in explained.higher_contexts] == [
        "262,144 needs 5 stages: 25 ms vs 20 ms",
        "131,072 needs 5 stages: 25 ms vs 20 ms",
    ]
    assert {item.rule for item in explained.higher_contexts} == {"lower_estimate"}
    assert [item.option.estimated_decode_network_ms_per_token
            for item in explained.higher_contexts] == [25, 25]
    assert "ranks the estimate before the context" in explained.summary
    data = explained.to_dict()
    assert data["chosen"]["context_length"] == 65536
    assert data["higher_contexts"][0]["option"]["stage_count"] == 5
    assert data["higher_contexts"][0]["rule"] == "lower_estimate"


def test_a_missed_target_is_the_rule_that_decides() -> None:
    # Target 22 ms: 4 stages (20 ms) meet it, 5 stages (25 ms) miss it.
    explained = explain_choice(_qwen(5, target=22))
    assert explained.chosen.decode_tpot_target_met is True
    assert [item.rule for item in explained.higher_contexts] == ["target_met", "target_met"]
    assert explained.higher_contexts[0].reason == (
        "262,144 needs 5 stages: 25 ms misses the 22 ms target")
    assert explained.higher_contexts[0].option.decode_tpot_target_met is False


def test_fractional_latencies_rank_and_read_in_milliseconds() -> None:
    # 5.5 ms a node: 4 stages 22 ms, 5 stages 27.5 ms; a 22 ms target is met exactly.
    explained = explain_choice(_qwen(5.5, target=22))
    assert explained.chosen.estimated_decode_network_ms_per_token == 22
    assert explained.chosen.decode_tpot_target_met is True
    assert explained.higher_contexts[0].reason == (
        "262,144 needs 5 stages: 27.5 ms misses the 22 ms target")
    untargeted = explain_choice(_qwen(5.5))
    assert untargeted.higher_contexts[0].reason == "262,144 needs 5 stages: 27.5 ms vs 22 ms"


def test_without_latency_the_highest_context_wins_and_nothing_is_above() -> None:
    explained = explain_choice(_qwen(None))
    assert not explained.latency_aware
    assert (explained.chosen.context_length, explained.chosen.stage_count) == (262144, 5)
    assert explained.higher_contexts == ()
    assert "highest context that fits" in explained.summary


def test_when_the_native_context_wins_nothing_higher_is_listed() -> None:
    # Zero latency: every estimate is 0 ms, so the highest context wins the tie.
    explained = explain_choice(_qwen(0))
    assert explained.chosen.context_length == 262144
    assert explained.higher_contexts == ()
    assert explained.summary.endswith("no higher context fits")


def test_no_plan_raises_like_plan_topology() -> None:
    with pytest.raises(PlanError) as caught:
        explain_choice(_qwen(5, count=3))
    assert caught.value.code == "NoValidTopology"


def test_reports_and_the_plan_command_show_the_explanation(tmp_path: Any) -> None:
    import json
    import subprocess
    import sys

    from planner.reports import content as report_content
    from planner.reports.html import render_html
    from planner.reports.jsonreport import render_json
    from planner.reports.markdown import render_markdown

    reason = "262,144 needs 5 stages: 25 ms vs 20 ms"
    report = report_content.build_report(_qwen(5), include_candidates=False,
                                         include_what_if=False)
    assert report.choice is not None
    assert report.choice["higher_contexts"][0]["reason"] == reason
    assert reason in render_markdown(report)
    assert "Why this shape" in render_markdown(report)
    assert reason in render_html(report)
    assert json.loads(render_json(report))["choice"]["chosen"]["stage_count"] == 4

    fleet = tmp_path / "fleet.toml"
    fleet.write_text(
        'name = "five"\n[model]\npreset = "qwen3-coder-480b-a35b"\nkv_cache_type = "q8_0"\n'
        '[[nodes]]\nid = "gpu"\ncount = 5\nvram = "80 GiB"\nlatency_ms = 5\n')
    done = subprocess.run([sys.executable, "-m", "planner.cli", "plan", str(fleet)],
                          capture_output=True, text=True, check=True)
    assert "why this shape: context 65,536 on 4 stages" in done.stdout
    assert reason in done.stdout
