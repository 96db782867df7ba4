#!/usr/bin/env bash
# Installs the Debian packages Rudder builds with, only those missing. Idempotent; quiet when all are present.
set -euo pipefail
packages=(
  cmake make g++ pkg-config   # pkg-config: the install test builds the examples with it too
  libtorch-dev libopenblas0-pthread   # LibTorch; without OpenBLAS it falls back to reference BLAS (~30x slower)
  libboost-dev libboost-filesystem-dev nlohmann-json3-dev libspdlog-dev libcli11-dev libdlpack-dev zlib1g-dev
  libssl-dev   # OpenSSL libcrypto: SHA-256 of plugin files (recipe pins)
  libgtest-dev libbenchmark-dev python3   # python3: the Python binding and its test, JSON checks in the CLI tests
  clang libclang-rt-14-dev                # make test-sanitize: ASan/UBSan build and the libFuzzer targets
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
