"""The item bank: questions with exact answers, generated from a seed, that every arm answers greedily.

The ``items`` gate runs it in every run and keeps each answer in the arm's equivalence sidecar, so a
comparison (or ``vllmqual compare``, offline) pairs two arms item by item on the same bank hash.
"""

from .bank import BANK_NAME, BANK_VERSION, Bank, BankSettings, Item, build_bank, operator_items
from .judges import JUDGE_VERSION, JUDGES, Judgement, judge
from .score import family_summaries, rejudge

__all__ = ["BANK_NAME", "BANK_VERSION", "JUDGES", "JUDGE_VERSION", "Bank", "BankSettings", "Item", "Judgement",
           "build_bank", "family_summaries", "judge", "operator_items", "rejudge"]
