#!/usr/bin/env bash
# Installs the Debian packages Rudder builds with, only those missing. Idempotent; quiet when all are present.
# Usage: install-deps.sh [--demo]   --demo: only what building Rudder and running it needs (make demo), not the
#                                    test and benchmark tools (make test installs those)
set -euo pipefail
build_packages=(
  cmake make ninja-build pkg-config   # pkg-config: the install test builds the examples with it too
  clang   # the compiler `make` configures a new build tree with: 4/5 of GCC's time on Rudder (docs/testing.md)
  libtorch-dev libopenblas0-pthread   # LibTorch; without OpenBLAS it falls back to reference BLAS (~30x slower)
  libopenblas0-openmp                 # OpenBLAS on OpenMP: one thread pool with LibTorch's (selected below)
  libboost-dev libboost-filesystem-dev nlohmann-json3-dev libspdlog-dev libcli11-dev libdlpack-dev zlib1g-dev
  libssl-dev   # OpenSSL libcrypto: SHA-256 of plugin files (recipe pins)
  libpcre2-dev libutf8proc-dev   # BPE tokenizers: Unicode regexes of the pre-split, NFC
  libcpp-httplib-dev prometheus-cpp-dev   # rudder serve: HTTP and its /metrics
  libgoogle-perftools-dev   # tcmalloc_minimal for the rudder command: a long training run's memory stays flat
)
test_packages=(
  libgtest-dev libbenchmark-dev python3   # python3: the Python binding and its test, JSON checks in the CLI tests
  python3-torch   # the MDLM/SEDD checkpoint test writes its random-weight checkpoints and reference outputs with it
  python3-jsonschema   # structured output's validity test checks every sample with an independent validator
  libclang-rt-14-dev   # make test-sanitize: clang's ASan/UBSan runtimes and libFuzzer
  lld   # links the test build and the sanitized one in a fraction of GNU ld's time (CMakeLists.txt)
  chromium   # the playground's browser test (serve.playground), driven by playwright-core from npm
  python3-distributed   # rudder.dask (bulk generation and sharded evals on Dask) and its test
  nginx      # serve.nginx_replicas: two rudder serve replicas behind it (run unprivileged by the test; see below)
)
packages=("${build_packages[@]}")
demo=0
[ "${1:-}" = --demo ] && demo=1
[ $demo -eq 1 ] || packages+=("${test_packages[@]}")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm: the BPE tokenizer tests fetch their reference (Hugging Face's JavaScript tokenizers) from npm. Only
# when there is no npm at all: a Node.js installed another way (NodeSource's nodejs ships its own npm) is kept.
[ $demo -eq 1 ] || command -v npm > /dev/null || missing+=(nodejs npm)
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  # Debian starts the nginx it installs as a system web server on port 80; the test runs its own on loopback, so a
  # service this script brought in is stopped and disabled again.
  if [[ " ${missing[*]} " == *" nginx "* ]] && [ -d /run/systemd/system ]; then
    echo "stopping and disabling the nginx service just installed (the tests start their own)"
    $sudo systemctl disable --now nginx > /dev/null 2>&1 || true
  fi
fi

# OpenBLAS's OpenMP build shares LibTorch's OpenMP pool, so matrix products and elementwise work are split by the
# same threads; the pthreads build Debian selects by default keeps a second pool that Rudder must hold to one
# thread (two pools on two cores spin against each other). Measured: 1.72x at two threads instead of 1.37-1.47x
# (docs/design.md, "Compute threads"). Debian's alternatives choose the build system-wide; a choice made by hand
# (manual mode) is left alone, and Rudder runs correctly with either build.
for target in /usr/lib/*/openblas-openmp/libblas.so.3 /usr/lib/*/openblas-openmp/libopenblas.so.0; do
  [ -e "$target" ] || continue
  alt=$(basename "$target")
  name=$alt-$(basename "$(dirname "$(dirname "$target")")")   # e.g. libblas.so.3-x86_64-linux-gnu
  status=$(update-alternatives --query "$name" 2>/dev/null | sed -n 's/^Status: //p')
  current=$(update-alternatives --query "$name" 2>/dev/null | sed -n 's/^Value: //p')
  if [ "$status" = auto ] && [ "$current" != "$target" ] && [ -e "$target" ]; then
    echo "selecting OpenBLAS's OpenMP build for $alt (update-alternatives --set $name $target)"
    $sudo update-alternatives --set "$name" "$target" > /dev/null
  fi
done
