"""Carry a comparison/3 record forward to comparison/4, the schema with the equivalence section.

It adds nothing the run did not measure: the arms of a comparison/3 record answered no
equivalence probe, so the section says ``not measurable`` with that reason, and the decision's
"does not prove" gains the sentence the current code writes for it. The verdict stays as it was
judged (an equivalence that is not measured caps a comparison below promotable; the records this
carries forward were not above healthy, and one that was is refused rather than re-judged).

    python scripts/gpu/migrate_comparison_v3.py IN.json OUT.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pytest_vllmqual.ab.compare import SCHEMA_ID, SCHEMA_VERSION, validate_comparison
from pytest_vllmqual.equivalence.comparison import LOWER_BOUND_NOTE
from pytest_vllmqual.equivalence.verdict import Thresholds

OLD_ID = "https://pytest-vllmqual/schemas/comparison/3"
REASON = "the control ran no equivalence probe (a comparison/3 record: its arms predate the probe)"


def migrate(record: dict[str, Any]) -> dict[str, Any]:
    """The comparison/4 form of a comparison/3 record."""
    if record.get("schema") != OLD_ID:
        raise ValueError(f"not a comparison/3 record: {record.get('schema')!r}")
    if record.get("verdict") in ("promotable", "priority-challenger"):
        raise ValueError(f"a {record['verdict']} comparison would be capped by the new rule: run it again instead")
    out = dict(record)
    out["schema"], out["schema_version"] = SCHEMA_ID, SCHEMA_VERSION
    out["equivalence"] = {"verdict": "not measurable", "reasons": [REASON], "thresholds": Thresholds().to_dict(),
                          "floor": {"status": "not measured", "reason": "no comparison was made"}, "figures": [],
                          "notes": [LOWER_BOUND_NOTE]}
    decision = dict(out["decision"])
    decision["does_not_prove"] = [*decision.get("does_not_prove", []),
                                  f"that the candidate answers as the control does (equivalence not measurable: {REASON})"]
    out["decision"] = decision
    validate_comparison(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    args = parser.parse_args(argv)
    try:
        record = migrate(json.loads(args.source.read_text()))
    except ValueError as exc:
        print(f"{args.source}: {exc}", file=sys.stderr)
        return 1
    args.target.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
