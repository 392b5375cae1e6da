"""Make a real GPU server log fit to commit as a parser fixture.

The logs came from the runs of ``scripts/gpu/run_gpu_campaign.sh`` on a lent 2× H200 host. Only
what says where files live on that host is rewritten; every line vLLM printed keeps its shape:

- the project checkout's path becomes ``/srv/vllmqual`` and the home folder ``/srv/operator``;
- the host's own address in the documentation range 192.0.2.0/24 becomes 127.0.0.2;
- a first line says where the log was seen (the parser fixtures' convention);
- torch.compile cache keys (hex digests of the host's build) become zeros of the same length;
- any other address than loopback fails the run, so a log from a real network is looked at by
  hand instead of committed.

    python scripts/gpu/sanitize_gpu_log.py RAW.log OUT.log --checkout /work/main --home /root \
        --seen "vllm 0.24.0 on 2x NVIDIA H200, TP=2, 2026-11-30 (scripts/gpu/run_gpu_campaign.sh)"
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

_HEX_KEY_RE = re.compile(r"(torch_compile_cache/(?:torch_aot_compile/)?)([0-9a-f]{10,64})")
_ADDRESS_RE = re.compile(r"\b(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\b")
_ALLOWED_ADDRESSES = ("127.", "0.0.0.0")


def sanitize(text: str, *, checkout: str, home: str) -> str:
    text = text.replace(checkout.rstrip("/"), "/srv/vllmqual").replace(home.rstrip("/") + "/", "/srv/operator/")
    text = re.sub(r"\b192\.0\.2\.\d{1,3}\b", "127.0.0.2", text)
    text = _HEX_KEY_RE.sub(lambda m: m.group(1) + "0" * len(m.group(2)), text)
    for match in _ADDRESS_RE.finditer(text):
        if not match.group(0).startswith(_ALLOWED_ADDRESSES) and not _is_version(text, match):
            raise SystemExit(f"address {match.group(0)} in the log: check it by hand before committing")
    return text


def _is_version(text: str, match: re.Match[str]) -> bool:
    """A dotted number inside a version string (e.g. 2.11.0.1) is not an address."""
    before = text[max(0, match.start() - 12):match.start()]
    return "version" in before or "v" == before[-1:]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("raw", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--checkout", required=True, help="the project checkout's path on the GPU host")
    parser.add_argument("--home", required=True, help="the home folder of the user that ran the server")
    parser.add_argument("--seen", required=True, help="where the log was seen, for its first line")
    args = parser.parse_args(argv)
    header = f"# seen: {args.seen}; paths rewritten by scripts/gpu/sanitize_gpu_log.py\n"
    args.out.write_text(header + sanitize(args.raw.read_text(errors="replace"), checkout=args.checkout,
                                          home=args.home))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
