"""A ladder rung's decode rate, and whose view it is: the client's clock where it could time
decode, else the server's own decode-time histogram around the rung (one request in flight),
else not measured. The figures are the shape of the 393K rung on one H200, where the output
tokens reached the client in one burst."""

from __future__ import annotations

from pytest_vllmqual.gates.ladder import _cross_check
from pytest_vllmqual.records import RungRecord
from pytest_vllmqual.report.number_format import fmt_decode
from pytest_vllmqual.vllm.endpoints import MetricsSnapshot, parse_metrics


def scrape(ttft: tuple[float, int], decode: tuple[float, int] | None) -> MetricsSnapshot:
    """A /metrics body with the TTFT histogram and, where given, the decode-time histogram (sum, count)."""
    lines = ["# TYPE vllm:time_to_first_token_seconds histogram",
             f'vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {ttft[1]}',
             f"vllm:time_to_first_token_seconds_sum {ttft[0]}",
             f"vllm:time_to_first_token_seconds_count {ttft[1]}"]
    if decode is not None:
        lines += ["# TYPE vllm:request_decode_time_seconds histogram",
                  f'vllm:request_decode_time_seconds_bucket{{le="+Inf"}} {decode[1]}',
                  f"vllm:request_decode_time_seconds_sum {decode[0]}",
                  f"vllm:request_decode_time_seconds_count {decode[1]}"]
    return parse_metrics("\n".join(lines) + "\n")


def burst_rung() -> RungRecord:
    """16 output tokens read in one burst: 30.0 s to the first, 30.01 s to the end of the stream."""
    return RungRecord(index=3, target=389283, target_label="0.99 x max_model_len", prompt_tokens=389283,
                      completion_tokens=16, ttft_s=30.0, e2e_s=30.01, decode_tok_s=15 / 0.01, decode_source="client",
                      ok=True)


def test_a_burst_the_client_could_not_time_is_measured_by_the_servers_decode_time() -> None:
    rung = burst_rung()
    _cross_check(rung, scrape((10.0, 5), (1.0, 5)), scrape((39.8, 6), (1.203, 6)))
    assert rung.server_ttft_s is not None and round(rung.server_ttft_s, 3) == 29.8
    assert rung.decode_source == "server_metrics"
    assert rung.decode_tok_s is not None and round(rung.decode_tok_s, 2) == round(15 / 0.203, 2) == 73.89
    assert rung.server_decode_tok_s == rung.decode_tok_s and rung.decode_not_measured is None
    assert rung.client_decode_not_measured == ("the client read the first token 0.200 s after the server sent it, "
                                               "longer than the 0.010 s it would have timed decode over")
    assert fmt_decode(rung.decode_tok_s, rung.decode_source) == ("73.89 decode tok/s (server metrics: the client "
                                                                 "read the answer late)")


def test_without_the_servers_decode_time_the_burst_is_not_measured() -> None:
    rung = burst_rung()
    _cross_check(rung, scrape((10.0, 5), None), scrape((39.8, 6), None))
    assert rung.decode_tok_s is None and rung.decode_source == "not measured"
    assert rung.decode_not_measured == rung.client_decode_not_measured is not None
    assert fmt_decode(None, rung.decode_source, rung.decode_not_measured) == ("decode not measured (the client read "
                                                                              "the answer late)")


def test_another_request_in_the_window_makes_the_servers_figure_unusable() -> None:
    rung = burst_rung()
    _cross_check(rung, scrape((10.0, 5), (1.0, 5)), scrape((39.8, 6), (1.5, 7)))
    assert rung.server_decode_tok_s is None and rung.decode_source == "not measured"


def test_a_client_that_read_in_time_keeps_its_own_figure() -> None:
    rung = RungRecord(index=0, target=4096, target_label="0.125 x max_model_len", prompt_tokens=4096,
                      completion_tokens=16, ttft_s=0.52, e2e_s=0.60, decode_tok_s=15 / 0.08, decode_source="client",
                      ok=True)
    _cross_check(rung, scrape((1.0, 1), (0.1, 1)), scrape((1.5, 2), (0.178, 2)))
    assert rung.decode_source == "client" and rung.decode_tok_s == 15 / 0.08
    assert rung.server_decode_tok_s is not None and round(rung.server_decode_tok_s, 1) == round(15 / 0.078, 1)
    assert rung.client_decode_not_measured is None
    assert fmt_decode(rung.decode_tok_s, rung.decode_source) == "187.50 decode tok/s"
