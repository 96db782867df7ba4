#!/usr/bin/env bash
# Rudder configured against the LibTorch inside a PyTorch installation, found the way docs/gpu.md tells a CUDA user to
# find it (CMake's Torch_DIR under torch.utils.cmake_prefix_path), and the layers that hold tensor code built against
# it: with a CUDA-enabled PyTorch, every library and the CLI (CMake must also have found CUDA); with a CPU-only one (as
# Debian's python3-torch here), the plugins layer only, which checks the mechanism without a second full build.
# Skipped (exit 77) where no Python with torch is found. Usage: torch_from_python_test.sh SOURCE_DIR
# RUDDER_TORCH_PYTHON names the Python to ask (default: python3 on PATH, then /usr/bin/python3).
set -uo pipefail
source=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

python=
for candidate in "${RUDDER_TORCH_PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$candidate" ] && "$candidate" -c 'import torch' > /dev/null 2>&1 && { python=$candidate; break; }
done
[ -n "$python" ] || { echo "skipped: no Python that imports torch (set RUDDER_TORCH_PYTHON)"; exit 77; }
read -r prefix cuda abi < <("$python" -c 'import torch
print(torch.utils.cmake_prefix_path, torch.version.cuda or "none", int(torch.compiled_with_cxx11_abi()))') \
  || fail "$python could not describe its torch"
echo "torch from $python: cmake prefix $prefix, CUDA $cuda, C++11 ABI $abi"
# Debian's python3-torch ships its CMake package in libtorch-dev instead (/usr/lib/<arch>/cmake/Torch, which the
# main build uses): there is nothing to find this way.
[ -f "$prefix/Torch/TorchConfig.cmake" ] || { echo "skipped: this PyTorch has no CMake package ($prefix/Torch)"; exit 77; }
# Rudder links Debian's C++ libraries (Boost, spdlog, fmt, CLI11's users), all built with the C++11 ABI; a LibTorch
# built with the old one cannot link with them, and CMake would only say so at the last link.
[ "$abi" = 1 ] || fail "this LibTorch was built without the C++11 ABI (torch.compiled_with_cxx11_abi() is False); see docs/gpu.md"

cmake -S "$source" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$prefix/Torch" -DRUDDER_BUILD_TESTS=OFF \
  -DRUDDER_BUILD_BENCH=OFF > "$work/configure.log" 2>&1 || fail "configure: $(tail -30 "$work/configure.log")"
found=$(grep '^Torch_DIR:' "$work/build/CMakeCache.txt" | cut -d= -f2-)
[ "$(realpath "$found")" = "$(realpath "$prefix/Torch")" ] || fail "CMake used Torch_DIR=$found, not $prefix/Torch"
if [ "$cuda" != none ]; then
  grep -q -i '^CUDA_TOOLKIT_ROOT_DIR:\|^CUDAToolkit_\|^CAFFE2_USE_CUDA' "$work/build/CMakeCache.txt" \
    || fail "a CUDA PyTorch ($cuda), but CMake found no CUDA toolkit: $(grep -i cuda "$work/configure.log" | tail -5)"
  targets=(rudder)  # the CLI: every library under it
else
  targets=(rudder_plugins)
fi
jobs=$(nproc)
cmake --build "$work/build" -j"$jobs" --target "${targets[@]}" > "$work/build.log" 2>&1 \
  || fail "build of ${targets[*]}: $(grep -m5 -B2 -A5 'error' "$work/build.log")"
echo "built ${targets[*]} against $prefix/Torch"
