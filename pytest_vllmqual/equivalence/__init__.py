"""Output equivalence: the probe each arm answers, the item bank, its sidecar file, and the figures
and paired statistics over two arms.

The names below are the package's door: a module outside the package imports them from here, not
from a submodule, so the package can rearrange its modules without its callers noticing
(``tests/unit/project/test_equivalence_door.py`` holds both rules). The comparison of two reports
(:mod:`pytest_vllmqual.equivalence.comparison`) sits above the report layer and is imported by its
own name; everything named here sits below the gates.
"""

from .depth import DepthSettings
from .depth_figures import depth_lines
from .items.bank import BANK_VERSION, BankSettings, Item, build_bank
from .items.judges import NumberAnswer, judge_final_number
from .items.runner import run_bank
from .layers import PromotionSettings, layer_cases, layers_lines, promotion_section
from .load_floor import BLOCK_KEY as LOAD_FLOOR_KEY
from .load_floor import FloorSettings, floor_levels
from .load_floor_runner import FloorQuestions, RecordedAnswers, run_floor
from .memory import ProbeMemory, model_vocab, server_memory, size_probe
from .outcomes import ItemOutcome
from .probe import OPEN_PROMPTS, ProbeSettings
from .runner import run_probe
from .sidecar import BLOCKS_DIR, PRIVATE_NAME, has_answers, publish, write_block
from .sidecar import load as load_sidecar
from .tasks import TaskSettings, tasks_line
from .tool_replay import FAMILY as TOOL_REPLAY_FAMILY
from .tool_replay import SIDECAR_KEY as TOOL_REPLAY_KEY
from .tool_replay import arm_range as tool_replay_range
from .verdict import FIGURES, FigureSpec, Thresholds, fmt_interval

__all__ = ["BANK_VERSION", "BLOCKS_DIR", "FIGURES", "LOAD_FLOOR_KEY", "OPEN_PROMPTS", "PRIVATE_NAME", "TOOL_REPLAY_FAMILY",
           "TOOL_REPLAY_KEY", "BankSettings", "DepthSettings", "FigureSpec", "FloorQuestions", "FloorSettings", "Item", "ItemOutcome", "NumberAnswer",
           "ProbeMemory", "ProbeSettings", "PromotionSettings", "RecordedAnswers", "TaskSettings", "Thresholds", "build_bank",
           "depth_lines", "floor_levels", "fmt_interval", "has_answers", "judge_final_number", "layer_cases", "layers_lines",
           "load_sidecar", "model_vocab", "promotion_section", "publish", "run_bank", "run_floor", "run_probe", "server_memory",
           "size_probe", "tasks_line", "tool_replay_range", "write_block"]
