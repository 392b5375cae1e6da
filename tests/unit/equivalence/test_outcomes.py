from pytest_vllmqual.equivalence.outcomes import ItemOutcome


def test_an_outcome_survives_its_dict() -> None:
    outcome = ItemOutcome(item_id="arith-3-0007", family="arithmetic", correct=False, parsed=False,
                          hit_max_tokens=True)
    assert ItemOutcome.from_dict(outcome.to_dict()) == outcome


def test_an_older_dict_without_the_format_facts_reads_as_parsed_and_stopped() -> None:
    outcome = ItemOutcome.from_dict({"item_id": "a", "family": "f", "correct": True})
    assert outcome.parsed and not outcome.hit_max_tokens
