"""The probe's pieces without a server (its text: test_probe_text.py): the recipe's settings within the model's limits,
the chunks, the parse of vLLM's prompt and chat log probabilities, the probe hash."""

from __future__ import annotations

from pytest_vllmqual.equivalence.probe import (
    ProbeSettings,
    chunk_plan,
    parse_chat_steps,
    parse_prompt_positions,
    probe_sha256,
    token_id,
)


def test_settings_keep_lengths_the_model_and_the_chunk_cap_allow() -> None:
    settings = ProbeSettings.from_recipe({"context_lengths": [512, 4096, 8192, 16384], "max_chunk_tokens": 8192}, 8192)
    assert settings.context_lengths == (512, 4096)
    assert settings.dropped_lengths == (8192, 16384)  # 8,192 leaves no room for the generated token
    assert ProbeSettings.from_recipe({}, None).context_lengths == (512, 1024)


def test_chunks_are_consecutive_windows_shortest_first() -> None:
    settings = ProbeSettings(context_lengths=(4, 8), chunks_per_length=2)
    chunks = chunk_plan(list(range(30)), settings)
    assert chunks == [(4, [0, 1, 2, 3]), (4, [4, 5, 6, 7]), (8, list(range(8, 16))), (8, list(range(16, 24)))]
    assert len(chunk_plan(list(range(10)), settings)) == 2  # too short for an 8-token chunk


def test_prompt_logprobs_parse_keeps_top_k_and_the_scored_token() -> None:
    tokens = [1, 2, 3, 4]
    entries = [None,
               {"2": {"logprob": -0.5, "rank": 1}, "9": {"logprob": -1.5, "rank": 2}},
               {"9": {"logprob": -0.2, "rank": 1}, "8": {"logprob": -1.9, "rank": 2}, "3": {"logprob": -4.0, "rank": 7}},
               {"4": {"logprob": -0.1, "rank": 1}, "5": {"logprob": -3.0, "rank": 2}}]
    rows = parse_prompt_positions(entries, tokens, 2, top_k=2)
    assert rows[0] == [3, -4.0, [[9, -0.2], [8, -1.9]]]  # the scored token ranked 7th: not in the top-K
    assert rows[1] == [4, -0.1, [[4, -0.1], [5, -3.0]]]


def test_chat_logprobs_parse_reads_token_ids_not_text() -> None:
    content = [{"token": "token_id:42", "logprob": -0.1,
                "top_logprobs": [{"token": "token_id:42", "logprob": -0.1}, {"token": "token_id:7", "logprob": -2.0}]}]
    assert parse_chat_steps(content) == [[42, [[42, -0.1], [7, -2.0]]]]
    assert token_id("token_id:5") == 5 and token_id("hello") is None


def test_the_probe_hash_changes_with_k_and_with_the_tokens() -> None:
    settings = ProbeSettings()
    base = probe_sha256([1, 2, 3], [(2, [1, 2])], [["smoke", "0" * 64]], settings, 20)
    assert base == probe_sha256([1, 2, 3], [(2, [1, 2])], [["smoke", "0" * 64]], settings, 20)
    assert base != probe_sha256([1, 2, 3], [(2, [1, 2])], [["smoke", "0" * 64]], settings, 10)
    assert base != probe_sha256([1, 2, 4], [(2, [1, 2])], [["smoke", "0" * 64]], settings, 20)
