"""Equivalence by context depth: the buckets, the windows, the forced one-token requests, and the
per-bucket figures with their minimum of windows and A/A floor, on synthetic answers."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

import pytest
from support.equivalence_samples import depth_body

from pytest_vllmqual.equivalence.depth import (
    DepthSettings,
    DepthWindow,
    Forcing,
    default_edges,
    forced_request,
    parse_forced,
    plan_windows,
    run_depth,
    score_window,
)
from pytest_vllmqual.equivalence.depth_figures import depth_comparison
from pytest_vllmqual.equivalence.verdict import Thresholds
from pytest_vllmqual.report.html_equivalence import equivalence_html


@pytest.mark.parametrize(("largest", "edges"), [
    (8110, [1024, 2048, 4096, 8110]),             # SmolLM2: 0.99 x 8,192
    (32440, [1024, 2048, 4096, 8192, 16384, 32440]),  # the fixture model: 0.99 x 32,768
    (4500, [1024, 2048, 4500]),                   # a last bucket under a quarter of the one before is merged
    (389000, [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 389000]),
    (800, [800]),
])
def test_edges_double_up_to_the_largest_depth(largest: int, edges: list[int]) -> None:
    assert default_edges(largest) == edges


def test_a_cheap_profile_keeps_the_deepest_buckets() -> None:
    assert default_edges(32440, buckets=2) == [16384, 32440]
    settings = DepthSettings.from_recipe({"depth_buckets": 2}, 32440, 32768)
    assert settings.edges == (16384, 32440) and settings.max_depth_source == "the largest ladder rung"


def test_settings_follow_the_recipe_within_max_model_len() -> None:
    assert DepthSettings.from_recipe({"depth": False}, 8110, 8192).off == "gates.equivalence.depth is false"
    assert DepthSettings.from_recipe({}, None, 8192).edges == (1024, 2048, 4096, 8191)
    assert DepthSettings.from_recipe({"depth_max": 20000}, 8110, 8192).edges[-1] == 8191
    given = DepthSettings.from_recipe({"depth_edges": [4096, 512, 9000], "depth_windows": 9,
                                       "depth_window_tokens": 8}, 8110, 8192)
    assert given.edges == (512, 4096) and given.windows_per_bucket == 9 and given.window_tokens == 8
    assert DepthSettings.from_recipe({"depth_edges": [9000]}, None, 8192).off == "no depth bucket fits max_model_len 8192"


def test_windows_spread_over_each_bucket_without_overlap() -> None:
    plan = plan_windows(DepthSettings(edges=(1024, 2048, 4096, 8110)), text_tokens=280_000)
    assert plan.buckets == ((0, 1024), (1024, 2048), (2048, 4096), (4096, 8110)) and not plan.dropped
    for index, (lo, hi) in enumerate(plan.buckets):
        mine = [w for w in plan.windows if w.bucket == index]
        assert len(mine) == 8
        assert all(lo < w.depth and w.depth + w.width <= hi for w in mine)
        assert all(a.depth + a.width <= b.depth for a, b in itertools.pairwise(mine))
        assert mine[-1].depth + mine[-1].width == hi  # the last window reaches the bucket's edge


def test_buckets_the_text_or_their_width_cannot_hold_are_dropped_with_why() -> None:
    plan = plan_windows(DepthSettings(edges=(100, 1024, 400_000), windows_per_bucket=8, window_tokens=16),
                        text_tokens=280_000)
    assert plan.buckets == ((100, 1024),)
    assert plan.dropped == ("(0, 100]: narrower than 8 windows of 16 tokens",
                            "(1,024, 400,000]: the probe text has 280,000 tokens")


def _answer(generated: int, logprob: float, top: Mapping[int, float]) -> dict[str, Any]:
    return {"choices": [{"logprobs": {"tokens": [f"token_id:{generated}"], "token_logprobs": [logprob],
                                      "top_logprobs": [{f"token_id:{k}": v for k, v in top.items()}]}}]}


def test_a_forced_request_scores_the_texts_token_with_its_context() -> None:
    body = forced_request([5, 6, 7, 8], 2, 20)
    assert body == {"prompt": [5, 6], "max_tokens": 1, "temperature": 0, "logprobs": 20, "allowed_token_ids": [7],
                    "return_tokens_as_token_ids": True}
    # The forced token ranked below K: vLLM returns K + 1 entries; the row keeps the top K and its own log probability.
    row = parse_forced(_answer(7, -5.0, {1: -0.1, 2: -1.0, 7: -5.0}), 7, 2)
    assert row == [7, -5.0, [[1, -0.1], [2, -1.0]]]


def test_depth_force_logit_bias_forces_with_the_largest_bias_and_is_recorded() -> None:
    """A server whose allowed_token_ids mask goes wrong (GPU vLLM 0.24.0 masked a forced token that
    already occurs in the prompt) can be forced by logit_bias instead; the settings and the method
    say which, and a refusal names it."""
    settings = DepthSettings.from_recipe({"depth_force": "logit_bias"}, 4096, 8192)
    assert settings.forcing is Forcing.LOGIT_BIAS and settings.to_dict()["forcing"] == "logit_bias"
    assert DepthSettings.from_recipe({}, 4096, 8192).forcing is Forcing.ALLOWED_TOKEN_IDS
    body = forced_request([5, 6, 7, 8], 2, 20, Forcing.LOGIT_BIAS)
    assert body["logit_bias"] == {"7": 100.0} and "allowed_token_ids" not in body
    with pytest.raises(ValueError, match=r"not the forced token 7 \(logit_bias\)"):
        parse_forced(_answer(1, -0.1, {1: -0.1, 7: -5.0}), 7, 2, Forcing.LOGIT_BIAS)
    seen: list[dict[str, Any]] = []

    def post(sent: dict[str, Any]) -> dict[str, Any]:
        seen.append(sent)
        forced = int(next(iter(sent["logit_bias"])))
        return _answer(forced, -0.5, {forced: -0.5, 3: -1.0})

    result = run_depth(post, list(range(3000)), DepthSettings(edges=(1024,), window_tokens=2,
                                                              forcing=Forcing.LOGIT_BIAS), 2)
    assert len(result["windows"]) == 8 and len(seen) == 16 and "(logit_bias)" in result["method"]


def test_a_server_that_did_not_force_or_masked_the_log_probabilities_is_refused() -> None:
    with pytest.raises(ValueError, match="not the forced token 7"):
        parse_forced(_answer(1, -0.1, {1: -0.1, 7: -5.0}), 7, 2)
    with pytest.raises(ValueError, match="raw_logprobs"):
        parse_forced(_answer(7, 0.0, {7: 0.0, 1: -9999.0}), 7, 2)


def _model(body: Mapping[str, Any]) -> dict[str, Any]:
    """A deterministic stand-in for the server: the next token's distribution from the context length."""
    n, forced = len(body["prompt"]), body["allowed_token_ids"][0]
    top = {n % 11: math.log(0.5), 50 + n % 3: math.log(0.2)}
    return _answer(forced, top.get(forced, math.log(0.01)), top)


def test_run_depth_scores_every_window_and_records_the_plan() -> None:
    tokens = list(range(3000))
    settings = DepthSettings(edges=(1024, 2048), windows_per_bucket=8, window_tokens=4)
    sent: list[int] = []

    def post(body: dict[str, Any]) -> dict[str, Any]:
        sent.append(len(body["prompt"]))
        return _model(body)

    body = run_depth(post, tokens, settings, 2)
    assert body["buckets"] == [[0, 1024], [1024, 2048]] and len(body["windows"]) == 16
    assert sent == sorted(sent)  # the shallowest first: each request extends the cached prefix
    window = body["windows"][0]
    assert window["positions"] == score_window(_model, tokens, DepthWindow(0, window["depth"], 4), 2)
    assert body["windows"][0]["context_sha256"] != body["windows"][1]["context_sha256"]


def test_run_depth_stops_at_its_budget_and_says_which_bucket() -> None:
    settings = DepthSettings(edges=(1024,), windows_per_bucket=8, window_tokens=4, budget_s=-1.0)
    body = run_depth(_model, list(range(2000)), settings, 2)
    assert body["windows"] == [] and "time budget" in body["dropped"][0] and body["dropped"][0].startswith("(0, 1,024]")


# -- the comparison: per-bucket figures, minimum windows, the A/A floor ---------------------------


def _bucket_figure(bucket: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    return next(f for f in bucket["figures"] if f["figure"] == key)


def _sides(**depth: Any) -> dict[str, Any]:
    return {"depth": depth_body(**depth)}


def test_identical_windows_are_equivalent_in_every_bucket_within_the_floor() -> None:
    section = depth_comparison(_sides(), _sides(), _sides(), Thresholds())
    assert section["verdict"] == "equivalent" and section["floor"] == {"status": "measured"}
    assert [(b["from"], b["to"], b["windows"], b["positions"]) for b in section["buckets"]] == [
        (0, 64, 8, 32), (64, 128, 8, 32)]
    for bucket in section["buckets"]:
        assert bucket["verdict"] == "equivalent" and bucket["floor"] == "measured"
        top1 = _bucket_figure(bucket, "top1_agreement")
        assert top1["point"] == 100.0 and top1["within_floor"] is True and top1["unit"] == "scored windows"
        assert _bucket_figure(bucket, "kl_lower_bound")["status"] == "not shown"


def test_an_error_that_grows_with_depth_shows_in_the_deep_bucket_only() -> None:
    section = depth_comparison(_sides(), _sides(shift=0.2, swap_top=True, deep_shift_only=True), None, Thresholds())
    shallow, deep = section["buckets"]
    assert shallow["verdict"] == "equivalent" and deep["verdict"] == "not equivalent"
    assert section["verdict"] == "not equivalent" and section["floor"] == {"status": "not measured"}
    ln = _bucket_figure(deep, "ln_ppl_ratio")
    # Hand-computed: the shift is 0.2 x (1, 2, 3, 1, 2, 3, 1, 2) over the windows (mean 0.375), and one
    # position of every four has its scored token's probability swapped from 0.6 to 0.25: + ln(2.4) / 4.
    assert ln["point"] == pytest.approx(0.375 + math.log(0.6 / 0.25) / 4, abs=1e-6) and ln["status"] == "beyond"
    assert _bucket_figure(deep, "top1_agreement")["point"] == 75.0  # every fourth position swaps its top token
    assert section["reasons"][1].startswith("(64, 128]: not equivalent: top-1 agreement 75.0%")


def test_a_bucket_with_fewer_than_eight_windows_has_too_few_units() -> None:
    section = depth_comparison(_sides(windows=7), _sides(windows=7), None, Thresholds())
    bucket = section["buckets"][0]
    assert bucket["windows"] == 7 and bucket["verdict"] == "inconclusive"
    assert _bucket_figure(bucket, "top1_agreement")["status"] == "too few units"
    assert "fewer than the 8 needed" in bucket["reasons"][0]


def test_windows_are_matched_by_depth_and_context() -> None:
    candidate = _sides()
    for window in candidate["depth"]["windows"][:3]:
        window["context_sha256"] = "f" * 64  # another text or tokenizer: not the same window
    section = depth_comparison(_sides(), candidate, None, Thresholds())
    assert [b["windows"] for b in section["buckets"]] == [5, 8]
    assert section["buckets"][0]["verdict"] == "inconclusive"


def test_an_arm_without_depth_windows_is_not_measurable() -> None:
    section = depth_comparison(_sides(), {"depth": None}, None, Thresholds())
    assert section == {"verdict": "not measurable", "reasons": ["the candidate scored no depth window"], "buckets": []}


def test_the_page_renders_the_buckets_as_judged() -> None:
    section = {"verdict": "equivalent", "depth": depth_comparison(
        _sides(), _sides(shift=0.2, deep_shift_only=True), None, Thresholds())}
    page = equivalence_html(section)
    assert 'id="equivalence-by-depth"' in page and 'id="equivalence-depth-verdict">not equivalent<' in page
    assert '<tr class="fail"><td>(64, 128]</td>' in page and "0.375 [" in page


def test_a_refused_window_stops_the_depth_probe_with_the_reason_and_keeps_what_was_scored() -> None:
    def post(body: dict[str, Any]) -> dict[str, Any]:
        if len(body["prompt"]) > 1500:
            raise ValueError("HTTP 400")
        return _model(body)

    settings = DepthSettings(edges=(1024, 2048), windows_per_bucket=8, window_tokens=4)
    body = run_depth(post, list(range(3000)), settings, 2)
    assert 8 <= len(body["windows"]) < 16 and body["dropped"][-1].startswith("the depth windows stopped at depth ")
    section = depth_comparison({"depth": body}, {"depth": {**body, "windows": []}}, None, Thresholds())
    assert section["reasons"] == [f"the candidate scored no depth window ({body['dropped'][-1]})"]
