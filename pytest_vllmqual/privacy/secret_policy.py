"""The package's one secret policy: which names are secret, and the engine arguments redacted by it.

One list of words (``SECRET_WORDS``) makes a name secret, read two ways: an environment
variable's name with a secret word anywhere in it (``SECRET_ENV_NAME``: ``HF_TOKEN``,
``MY_API_KEY``), an argument's or a field's name with one as a whole word or a long one anywhere
(``SECRET_KEY_NAME``: ``api_key``, not ``max_num_batched_tokens``). The scrubber reads the env
rule for the recipe's env values, the report builder both for report fields, the recipe-from-
command reader refuses a secret on a command line by the key rule, and :func:`redact_args`
redacts the engine's logged non-default args by it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["REDACTED_PLACEHOLDER", "SECRET_ENV_NAME", "SECRET_KEY_NAME", "SECRET_WORDS", "redact_args"]

SECRET_WORDS = ("token", "key", "apikey", "secret", "password", "passwd", "passphrase", "credential", "credentials")
"""THE words that make a name secret: the one list behind both name patterns below."""

SECRET_ENV_NAME = re.compile(r"(?i)(" + "|".join(SECRET_WORDS) + ")")
"""Environment variable names whose values are treated as secrets: a secret word anywhere (*TOKEN*, *KEY*)."""

SECRET_KEY_NAME = re.compile(
    r"(?i)(?:^|[_.\-\s])(?:" + "|".join(SECRET_WORDS) + r")(?:$|[_.\-\s])"
    + "|" + "|".join(word for word in SECRET_WORDS if len(word) >= 6)
    + "|^watermark_config$"
)
"""Argument and field names whose values are secrets: a secret word as a whole word (``api_key``,
``hf_token``; not ``max_num_batched_tokens`` or ``tokenizer``), a long one anywhere
(``client_secret``, ``dbpassword``), and ``watermark_config`` (vLLM >=0.30 redacts it itself)."""

REDACTED_PLACEHOLDER = "<redacted>"
"""What ``redact_args`` puts in place of a secret engine argument."""
_TOKEN_VALUE = re.compile(r"^(?:hf_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_\-]{8,}|(?:Bearer|bearer) \S+)$")
"""A whole argument value shaped like a token (the scrubber has its own patterns for tokens inside free text)."""


def redact_args(args: Mapping[str, Any], _path: str = "") -> tuple[dict[str, Any], list[str]]:
    """Copy of ``args`` with secret-named keys and token-looking strings replaced by ``<redacted>``.

    Returns the copy and the dotted key paths that were scrubbed (for the redaction summary).
    Nested dicts (``kv_transfer_config``, …) are scrubbed too. Values vLLM already masked
    (``***``) are normalised to the same placeholder.
    """
    out: dict[str, Any] = {}
    redacted: list[str] = []
    for key, value in args.items():
        path = f"{_path}{key}"
        if SECRET_KEY_NAME.search(str(key)):
            out[key] = None if value is None else REDACTED_PLACEHOLDER
            if value is not None:
                redacted.append(path)
        elif isinstance(value, Mapping):
            out[key], inner = redact_args(value, f"{path}.")
            redacted.extend(inner)
        elif isinstance(value, str) and _TOKEN_VALUE.match(value):
            out[key] = REDACTED_PLACEHOLDER
            redacted.append(path)
        else:
            out[key] = value
    return out, redacted
