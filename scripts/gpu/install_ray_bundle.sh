#!/usr/bin/env bash
# On the GPU host: reassemble the chunks made by ray_bundle.sh and install Ray into a target folder
# (the vLLM bundle's, by default), offline. A dependency wheel is installed only when the host
# (or the target) lacks that package or has a version Ray's requirements refuse, so packages the
# host already has are not shadowed by the target on PYTHONPATH.
#   scripts/gpu/install_ray_bundle.sh CHUNK_DIR [TARGET]   (default /tmp/site; then PYTHONPATH=TARGET)
# PYTHON names the interpreter (default python3).
set -euo pipefail
dir=${1:?usage: install_ray_bundle.sh CHUNK_DIR [TARGET]}; target=${2:-/tmp/site}
py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
if [ -f "$target/ray/__init__.py" ]; then echo "Ray already in $target"; exit 0; fi
(cd "$dir" && sha256sum -c --quiet ray-chunks.sha256)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cat "$dir"/r[0-9][0-9] | tar -x -C "$tmp"
mkdir -p "$target"
mapfile -t needed < <(PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" "$py" "$here/ray_bundle_pick.py" \
  "$tmp"/ray-bundle/ray-*.whl "$tmp"/ray-bundle/deps/*.whl)
# pip keeps the wheel's executable bits (Ray's raylet and GCS server are binaries in the wheel).
"$py" -m pip install -q --no-index --no-deps --no-compile --target "$target" "${needed[@]}"
PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" "$py" -c 'import ray; print("ray", ray.__version__)'
