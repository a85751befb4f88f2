#!/bin/sh
# Installs what opjit builds, tests and demonstrates with: Debian packages (clang-19 and its
# runtimes with libFuzzer for scripts/fuzz.sh among them; golang-go for `go tool pprof`, which
# reads `opjit export --pprof` files in the tests; PostgreSQL's server, libpq and libcrypto for
# the fleet store and its tests), then llama.cpp's prebuilt CPU
# libraries from npm (@node-llama-cpp/linux-x64 and node-llama-cpp, 3.22.1) into
# third_party/llama, with the ggml/llama headers from the source bundle node-llama-cpp carries
# (third_party/llama/src), and playwright-core from npm into third_party/playwright (the
# browser test drives Debian's chromium with it; groff formats the man page in a test).
# Idempotent: what is there already is left alone (no network).
set -eu
cd "$(dirname "$0")/.."
pkgs="build-essential cmake pkg-config libsqlite3-dev sqlite3 libcjson-dev libcriterion-dev
      libblas3 libopenblas0-pthread python3-numpy valgrind libunwind8 libdw-dev llvm-19-dev git
      clang-19 libclang-rt-19-dev libprotobuf-c-dev protobuf-c-compiler zlib1g-dev libzstd-dev golang-go
      chromium groff-base postgresql libpq-dev libssl-dev"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
    missing="$missing $p"
done
# node and npm: any installation will do (Debian's, or a vendor's package that bundles npm).
command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
if [ -n "$missing" ]; then
  echo "opjit deps: installing$missing" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -qq $missing >/dev/null
fi

llama=third_party/llama
version=3.22.1
bins=$llama/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
if ! grep -qs "\"version\": \"$version\"" "$llama/node_modules/node-llama-cpp/package.json" ||
  [ ! -f "$bins/libllama.v0.5.0.so" ]; then
  echo "opjit deps: npm install @node-llama-cpp/linux-x64@$version node-llama-cpp@$version" >&2
  mkdir -p "$llama"
  # No install scripts (they would build or download binaries) and no optional packages (the
  # CUDA and Vulkan builds): the prebuilt CPU libraries are what opjit's ggml host runs with.
  npm install --prefix "$llama" --no-audit --no-fund --ignore-scripts --omit=optional \
    --no-save --loglevel=error "@node-llama-cpp/linux-x64@$version" "node-llama-cpp@$version" >&2
fi
if [ ! -f "$llama/src/ggml/include/ggml.h" ]; then
  rm -rf "$llama/src"
  git clone -q "$llama/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$llama/src" 2>/dev/null
fi

# playwright-core only (no browser download: it drives /usr/bin/chromium); no install scripts.
playwright=third_party/playwright
pw_version=1.65.1
if ! grep -qs "\"version\": \"$pw_version\"" "$playwright/node_modules/playwright-core/package.json"; then
  echo "opjit deps: npm install playwright-core@$pw_version" >&2
  mkdir -p "$playwright"
  npm install --prefix "$playwright" --no-audit --no-fund --ignore-scripts --no-save \
    --loglevel=error "playwright-core@$pw_version" >&2
fi
