#!/usr/bin/env bash
# The GPU check (docs/gpu.md, "The GPU check"): on a machine with an NVIDIA GPU, PyTorch built with CUDA, CMake and
# nvcc, and no internet, one command of under 10 minutes that
#   1. configures and builds Rudder against that PyTorch's CUDA LibTorch (build-gpu/), with the other dependencies from
#      gpu-deps.tar.xz (scripts/gpu-deps.sh makes it on a Debian machine) where the system lacks them;
#   2. runs the runtime's and the public checkpoints' tests (CPU tests, now against the CUDA LibTorch);
#   3. checks that the GPU writes the CPU's tokens: the LLaDA and Dream fixtures with the authors' samplers at
#      temperature 0 and Fast-dLLM's caches, each recipe with "device" "cpu" and "cuda" (rudder_decode_bench);
#   4. measures Fast-dLLM's speed-ups on the GPU (bench/fast_dllm.py at 256 generated tokens, "device" "cuda").
# Results under $OUT when it is set (the device tool's output folder), else build-gpu/gpu-check/. Exits 77 saying what
# is missing where the machine lacks something, 1 when a step fails.
#   scripts/gpu-check.sh [--cpu]     --cpu: every step on the CPU with the existing build/ (checks the script here)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
device=cuda
[ "${1:-}" = --cpu ] && device=cpu
out=${OUT:-$root/build-gpu/gpu-check}
mkdir -p "$out"
log() { echo "[gpu-check $(date +%T)] $*" | tee -a "$out/summary.txt"; }
# The Python with PyTorch: the GPU machine's own; Debian's for --cpu.
python=${RUDDER_TORCH_PYTHON:-python3}
[ "$device" = cpu ] && python=${RUDDER_TORCH_PYTHON:-/usr/bin/python3}
: > "$out/summary.txt"

if [ "$device" = cuda ]; then
  missing=()
  command -v nvidia-smi > /dev/null || missing+=("nvidia-smi (the NVIDIA driver)")
  command -v cmake > /dev/null || missing+=("cmake")
  command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ] || missing+=("nvcc (the CUDA toolkit)")
  "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2> /dev/null ||
    missing+=("$python with a PyTorch that sees a GPU (torch.cuda.is_available())")
  glibc=$(ldd --version 2> /dev/null | head -1 | grep -oE '[0-9]+\.[0-9]+$' || echo 0)
  if [ ! -f gpu-deps.tar.xz ] && [ ! -f /usr/include/nlohmann/json.hpp ]; then
    missing+=("Rudder's other dependencies: run scripts/gpu-deps.sh on a Debian 12 machine and bring gpu-deps.tar.xz")
  fi
  if [ -f gpu-deps.tar.xz ] && [ "$(printf '%s\n2.36\n' "$glibc" | sort -V | head -1)" != 2.36 ]; then
    missing+=("glibc 2.36 or newer for gpu-deps.tar.xz's Debian 12 libraries (this machine has $glibc)")
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    log "cannot run: missing"
    for m in "${missing[@]}"; do log "  - $m"; done
    exit 77
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$out/summary.txt"
  "$python" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' | tee -a "$out/summary.txt"
  build=$root/build-gpu
  prefix_path=""
  if [ -f gpu-deps.tar.xz ]; then
    mkdir -p "$build/deps"
    tar -C "$build/deps" -xJf gpu-deps.tar.xz
    deps=$build/deps/usr
    arch_lib=$(ls -d "$deps"/lib/*-linux-gnu | head -1)
    prefix_path="-DCMAKE_PREFIX_PATH=$deps"
    export PKG_CONFIG_PATH="$arch_lib/pkgconfig:$deps/share/pkgconfig:${PKG_CONFIG_PATH:-}"
    export LD_LIBRARY_PATH="$arch_lib:${LD_LIBRARY_PATH:-}"
    export CPATH="$deps/include:${CPATH:-}"
  fi
  export PATH="/usr/local/cuda/bin:$PATH"
  torch_dir="$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')/Torch"
  log "configuring against $torch_dir"
  # shellcheck disable=SC2086
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$torch_dir" $prefix_path -DRUDDER_CLI_TCMALLOC=OFF \
    > "$out/configure.log" 2>&1 || { log "configure failed"; tail -30 "$out/configure.log"; exit 1; }
  log "building"
  cmake --build "$build" -j"$(nproc)" --target rudder rudder_runtime_tests rudder_bidirectional_llm_tests \
    rudder_decode_bench span length exclude_words > "$out/build.log" 2>&1 ||
    { log "build failed"; grep -m20 -E 'error' "$out/build.log"; exit 1; }
else
  build=$root/build
  log "--cpu: the existing build/, every step on the CPU"
  cmake --build "$build" -j2 --target rudder rudder_runtime_tests rudder_bidirectional_llm_tests \
    rudder_decode_bench span length exclude_words > "$out/build.log" 2>&1 || { log "build failed"; exit 1; }
fi

log "tests (the runtime's, and the public checkpoints')"
(cd "$build" && ctest -j"$(nproc)" -R '^(runtime\.|Recipe\.|LladaSampler|DreamSampler|FullRows|Generation|nets\.Bidirectional)' \
  --output-on-failure > "$out/ctest.log" 2>&1) || { log "tests failed"; tail -30 "$out/ctest.log"; exit 1; }
log "$(grep -E 'tests passed' "$out/ctest.log")"

log "the $device's tokens against the CPU's (LLaDA and Dream fixtures, the authors' samplers at temperature 0)"
fixture=$build/gpu-check-fixture
rm -rf "$fixture"
/usr/bin/env "$python" tests/nets/bidirectional_llm_fixture.py "$fixture" > "$out/fixture.log" 2>&1 ||
  { log "the fixture failed"; tail -5 "$out/fixture.log"; exit 1; }
for flavor in llada dream; do
  if [ $flavor = llada ]; then
    samplers='[{"label": "llada", "sampler": {"name": "llada", "steps": 16, "block_length": 8}},
               {"label": "llada threshold", "sampler": {"name": "llada", "block_length": 8, "threshold": 0.02}},
               {"label": "llada dual cache", "sampler": {"name": "llada", "steps": 16, "block_length": 8, "kv_cache": "dual"}}]'
  else
    samplers='[{"label": "dream entropy", "sampler": {"name": "dream", "steps": 16, "alg": "entropy"}},
               {"label": "dream origin", "sampler": {"name": "dream", "steps": 16, "alg": "origin"}}]'
  fi
  cat > "$out/parity_$flavor.json" << EOF
{"model": "$fixture/$flavor", "prompt": "the cat sat", "gen_length": 16, "rounds": 1, "threads": 2,
 "plugins": "$build/lib/rudder/plugins", "devices": ["cpu", "$device"], "samplers": $samplers}
EOF
  "$build/bin/rudder_decode_bench" "$out/parity_$flavor.json" > "$out/parity_$flavor.out.json" 2> "$out/parity_$flavor.log" ||
    { log "parity run failed"; tail -5 "$out/parity_$flavor.log"; exit 1; }
  "$python" - "$out/parity_$flavor.out.json" << 'EOF' | tee -a "$out/summary.txt"
import json, sys
r = json.load(open(sys.argv[1]))
for s in r["samplers"]:
    print(f"  {s['label']:20} on {s['device']:5}: {100 * s['same_as_first_device']:5.1f}% of the tokens the CPU wrote")
EOF
done

log "Fast-dLLM on the $device (bench/fast_dllm.py, ${GPU_CHECK_GEN_LENGTH:-256} generated tokens)"
"$python" bench/fast_dllm.py --build "$build" --device "$device" --gen-length "${GPU_CHECK_GEN_LENGTH:-256}" \
  > "$out/fast_dllm.txt" 2> "$out/fast_dllm.log" || { log "the benchmark failed"; tail -5 "$out/fast_dllm.log"; exit 1; }
cat "$out/fast_dllm.txt" | tee -a "$out/summary.txt"
cp "$build/fast_dllm.json" "$out/"
log "done"
