#!/usr/bin/env bash
# Build an offline bundle of Ray 2.60.0 for a GPU host with Python 3.12 and no package index, beside
# the vLLM bundle: Ray's cp312 manylinux wheel and the wheels of what Ray needs at run time that the
# vLLM bundle does not carry (ray_wheels.txt: click, filelock, msgpack, packaging, protobuf, pyyaml,
# requests and its own needs, attrs for jsonschema; jsonschema itself comes with the vLLM bundle).
#   scripts/gpu/ray_bundle.sh OUT_DIR [CHUNK_MIB]
# Writes OUT_DIR/r00, r01, ... of at most CHUNK_MIB (default 55) and OUT_DIR/ray-chunks.sha256.
# Install on the host with scripts/gpu/install_ray_bundle.sh OUT_DIR (into /tmp/site).
set -euo pipefail
out=${1:?usage: ray_bundle.sh OUT_DIR [CHUNK_MIB]}; mib=${2:-55}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ray-bundle/deps" "$out"
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
      --platform manylinux1_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_5_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
  -d "$work/ray-bundle/deps" -r "$here/ray_wheels.txt"
mv "$work"/ray-bundle/deps/ray-*.whl "$work/ray-bundle/"
ls "$work/ray-bundle" "$work/ray-bundle/deps"
tar -C "$work" -cf "$work/ray-bundle.tar" ray-bundle
rm -f "$out"/r[0-9][0-9]
split -b "${mib}M" -d -a 2 "$work/ray-bundle.tar" "$out/r"
(cd "$out" && sha256sum r[0-9][0-9] > ray-chunks.sha256)
du -sh "$work/ray-bundle.tar"; ls -la "$out"
