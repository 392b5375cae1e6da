"""How fast a content pin reads a model folder: the first time (every byte) and from the hash cache.

Usage: python -m benchmarks.bench_checkpoint_hash [--gib 1.5] [--shards 4] [--real] [--plain] [--json PATH]

Writes a folder of ``--shards`` safetensors shards of ``--gib`` GiB in all into a temporary
directory (sparse by default: no disk is used and the figure is the hashing's own; ``--real``
writes random bytes, which then sit in the page cache, so neither measures a cold disk), and
reads it once without hashing (which also fills the page cache), then hashes it with a fresh hash
cache: once with one thread, once with the default worker count, then again with the cache
filled. A safetensors shard gets two digests (its content and its raw
bytes), each read block fed to both. Prints one line per pass and writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.quick_mode import add_quick_flag, quick_note
from pytest_vllmqual.gates import checkpoint_hash
from pytest_vllmqual.layout import CACHE_ENV

ROOT = Path(__file__).resolve().parent.parent

MIB = 2**20


def write_folder(folder: Path, total: int, shards: int, real: bool, plain: bool = False) -> dict[str, Path]:
    """``shards`` safetensors files (``plain``: ``.bin`` files, one digest each) of ``total``
    bytes in all (sparse, or random bytes)."""
    folder.mkdir(parents=True)
    paths = {}
    for index in range(shards):
        path = folder / f"model-{index + 1:05d}-of-{shards:05d}.{'bin' if plain else 'safetensors'}"
        size = total // shards
        header = json.dumps({"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}).encode()
        header += b" " * (-len(header) % 8)
        with open(path, "wb") as handle:
            handle.write(struct.pack("<Q", len(header)) + header)
            if real:
                for _ in range(size // (64 * MIB)):
                    handle.write(os.urandom(64 * MIB))
                handle.write(os.urandom(size % (64 * MIB)))
            else:
                handle.truncate(8 + len(header) + size)
        paths[path.name] = path
    return paths


def read_only(paths: dict[str, Path]) -> dict[str, Any]:
    """Read every byte once without hashing: what the bytes cost, and the page cache warmed, so
    the passes after it differ only in their threads."""
    total, wall = 0, time.perf_counter()
    buffer = bytearray(checkpoint_hash.BLOCK_BYTES)
    for path in paths.values():
        with open(path, "rb", buffering=0) as handle:
            while count := handle.readinto(buffer):
                total += count
    seconds = time.perf_counter() - wall
    print(f"read only: {total / MIB:,.0f} MiB in {seconds:.3f} s = {total / MIB / max(seconds, 1e-9):,.0f} MiB/s",
          flush=True)
    return {"mib": round(total / MIB, 1), "seconds": round(seconds, 4),
            "mib_per_s": round(total / MIB / max(seconds, 1e-9), 1)}


def timed(paths: dict[str, Path], workers: int | None) -> dict[str, Any]:
    total = sum(path.stat().st_size for path in paths.values())
    cpu, wall = time.process_time(), time.perf_counter()
    found = checkpoint_hash.hash_files(paths, progress=lambda line: print(f"  {line}", flush=True), workers=workers)
    seconds = time.perf_counter() - wall
    return {"workers": workers or checkpoint_hash.hash_workers(len(paths)), "mib": round(total / MIB, 1),
            "seconds": round(seconds, 4), "mib_per_s": round(total / MIB / max(seconds, 1e-9), 1),
            "cpu_seconds": round(time.process_time() - cpu, 3),
            "from_cache": sum(1 for entry in found.values() if entry.from_cache)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.5, help="the folder's size in GiB (default 1.5)")
    parser.add_argument("--shards", type=int, default=4, help="how many shards (default 4)")
    parser.add_argument("--real", action="store_true", help="random bytes instead of a sparse file")
    parser.add_argument("--plain", action="store_true", help=".bin shards (one digest) instead of safetensors (two)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    if args.quick:
        quick_note("a 64 MiB folder: proves the benchmark runs, measures nothing")
        args.gib = 1 / 16
    with tempfile.TemporaryDirectory(prefix="bench-checkpoint-hash-") as scratch:
        os.environ[CACHE_ENV] = str(Path(scratch) / "cache")  # a fresh, empty hash cache
        paths = write_folder(Path(scratch) / "model", int(args.gib * 2**30), args.shards, args.real,
                             args.plain)
        passes = {"read only, into the page cache": read_only(paths)}
        for label, workers in (("first, 1 thread", 1), ("first, default threads", None), ("cached", None)):
            if label != "cached":
                os.environ[CACHE_ENV] = str(Path(scratch) / f"cache-{workers}")
            passes[label] = timed(paths, workers)
            figures = passes[label]
            print(f"{label}: {figures['mib']:,.0f} MiB in {figures['seconds']:.3f} s = {figures['mib_per_s']:,.0f} MiB/s "
                  f"({figures['workers']} thread(s), {figures['cpu_seconds']:.2f} s CPU, "
                  f"{figures['from_cache']}/{len(paths)} from the cache)", flush=True)
    result = {"quick": bool(args.quick), "gib": args.gib, "shards": args.shards, "real": args.real, "plain": args.plain,
              "cpus": os.cpu_count(), "load_average": os.getloadavg(), "passes": passes,
              "command": " ".join([os.path.basename(sys.executable), *sys.argv])}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
