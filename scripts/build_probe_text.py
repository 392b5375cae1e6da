"""Rebuild the equivalence probe's text from Debian's r-cran-janeaustenr package.

Usage:
    apt-get download r-cran-janeaustenr          # 1.0.0-1: Jane Austen's six novels, MIT-licensed package
    python scripts/build_probe_text.py r-cran-janeaustenr_1.0.0-1_all.deb            # the shipped text
    python scripts/build_probe_text.py DEB --books all --out austen-six-novels.txt   # ~1M tokens

The package keeps each novel as an R character vector (one element per line of the Project
Gutenberg edition, without Project Gutenberg's header and licence) in its lazy-load database
``data/Rdata.rdb``/``.rdx``. This script reads it with no R and no extra Python package: a small
reader of R's XDR serialization (version 2 or 3) for the one kind of object stored there. The
lines of a novel are joined by newlines; novels by three blank lines, in the order given.

The shipped text (``pytest_vllmqual/equivalence/data/probe_text.txt.gz``) is ``--books
prideprejudice,persuasion``; ``--books all`` is the six novels (about a million tokens), those two first, the text
for depths the shipped one is too short for (give it to a recipe as
``gates.equivalence.text_file`` with its SHA-256, which the script prints).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import struct
import subprocess
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path
from typing import Any

DATA = "usr/lib/R/site-library/janeaustenr/data/Rdata"
SHIPPED = ("prideprejudice", "persuasion")
ALL = (*SHIPPED, "sensesensibility", "mansfieldpark", "emma", "northangerabbey")
"""The six novels: the shipped two first (so the long text begins with the shipped one), then the others by year."""
SEPARATOR = "\n\n\n\n"
STRSXP, CHARSXP, VECSXP, INTSXP, LGLSXP, NILVALUE = 16, 9, 19, 13, 10, 254


class _Reader:
    """Just enough of R's XDR unserialize for the database's index and its character vectors."""

    def __init__(self, data: bytes) -> None:
        if data[:2] != b"X\n":
            raise ValueError("not an R XDR serialization")
        self.data, self.at = data, 2
        self.symbols: list[str] = []
        version = self.int()
        self.int(), self.int()  # the writer's and the minimum reader's R version
        if version == 3:
            length = self.int()  # the native encoding's name
            self.at += length
        elif version != 2:
            raise ValueError(f"R serialization version {version} is not supported")

    def int(self) -> int:
        value = struct.unpack_from(">i", self.data, self.at)[0]
        self.at += 4
        return int(value)

    def item(self) -> Any:
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if has_tag or kind not in (STRSXP, CHARSXP, VECSXP, INTSXP, LGLSXP, NILVALUE):
            raise ValueError(f"R object type {kind} is not supported here")
        if kind == NILVALUE:
            return None
        if kind == CHARSXP:
            length = self.int()
            if length < 0:
                return None
            text = self.data[self.at:self.at + length].decode("utf-8")
            self.at += length
            return text
        length = self.int()
        if kind in (INTSXP, LGLSXP):
            values: list[Any] = list(struct.unpack_from(f">{length}i", self.data, self.at))
            self.at += 4 * length
        else:
            values = [self.item() for _ in range(length)]
        if has_attr:
            return (values, self._attributes())
        return values

    def _attributes(self) -> dict[str, Any]:
        """A pairlist of attributes (tagged): only ``names`` is kept."""
        attributes: dict[str, Any] = {}
        while True:
            flags = self.int()
            if flags & 0xFF == NILVALUE:
                return attributes
            name = self._symbol()
            attributes[name] = self.item()

    def _symbol(self) -> str:
        """A tag: a new symbol (SYMSXP, 1, then its name) or a reference (255) to one read before."""
        flags = self.int()
        if flags & 0xFF == 1:
            name = self.item()
            self.symbols.append(str(name))
            return str(name)
        if flags & 0xFF == 255:
            number = flags >> 8 or self.int()
            return self.symbols[number - 1]
        raise ValueError(f"R tag of type {flags & 0xFF} is not supported here")


def _deb_member(deb: Path, member: str) -> bytes:
    """A file of a Debian package, through ``dpkg-deb --fsys-tarfile`` (any data compression)."""
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        handle = archive.extractfile(f"./{member}")
        if handle is None:
            raise ValueError(f"{deb.name} has no {member}")
        return handle.read()


def novels(deb: Path) -> dict[str, str]:
    """Every novel of the package's database, by its R name, as one string of lines."""
    index_values, index_attrs = _Reader(gzip.decompress(_deb_member(deb, DATA + ".rdx"))).item()
    index = dict(zip(index_attrs["names"], index_values, strict=True))
    variables_values, variables_attrs = index["variables"]
    database = _deb_member(deb, DATA + ".rdb")
    out = {}
    for name, (offset, length) in zip(variables_attrs["names"], variables_values, strict=True):
        blob = database[offset + 4:offset + length]  # 4 bytes: the uncompressed length
        lines = _Reader(zlib.decompress(blob)).item()
        out[name] = "\n".join("" if line is None else str(line) for line in lines)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("deb", type=Path, help="r-cran-janeaustenr_1.0.0-1_all.deb")
    parser.add_argument("--books", default=",".join(SHIPPED), help="R names in order, or 'all' (the six novels)")
    parser.add_argument("--out", type=Path, help="where to write (.gz: gzip); default: print the hashes only")
    args = parser.parse_args(argv)
    found = novels(args.deb)
    names = list(ALL) if args.books == "all" else args.books.split(",")
    missing = [name for name in names if name not in found]
    if missing:
        print(f"not in {args.deb.name}: {', '.join(missing)} (it has {', '.join(sorted(found))})", file=sys.stderr)
        return 1
    text = SEPARATOR.join(found[name] for name in names) + "\n"
    data = text.encode("utf-8")
    print(f"{len(text):,} characters, SHA-256 {hashlib.sha256(data).hexdigest()} ({', '.join(names)})")
    if args.out:
        payload = gzip.compress(data, compresslevel=9, mtime=0) if args.out.suffix == ".gz" else data
        with tempfile.NamedTemporaryFile(dir=args.out.parent, delete=False) as handle:
            handle.write(payload)
        Path(handle.name).replace(args.out)
        print(f"wrote {args.out} ({len(payload):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
