#!/usr/bin/env bash
# Installs what building and testing Sampan needs on Debian 12: compilers and CMake, the
# libraries (Debian packages only), and numpy for the Python references. Idempotent: packages
# already present are not fetched again. Needs root (or sudo) only when something is missing.
#
#   scripts/setup.sh               # build + test: everything below, pip peers included
#   scripts/setup.sh --build-only  # only the apt packages that building `sampan` needs (no
#                                  # tests, benches, fuzzers, pip packages): the image build stages
set -euo pipefail

build_only=0
for a in "$@"; do
  case "$a" in
    --build-only) build_only=1 ;;
    -h | --help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "setup: unknown option $a (usage: $0 [--build-only])" >&2; exit 2 ;;
  esac
done

# What `scripts/build.sh` with SAMPAN_BUILD_TESTS=OFF / SAMPAN_BUILD_BENCH=OFF needs: compilers,
# CMake/Ninja/ccache/pkg-config, the -dev libraries, protoc and grpc_cpp_plugin. The build itself
# runs no Python and no git.
BUILD_PACKAGES=(build-essential cmake ninja-build ccache pkg-config
  libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev libpcre2-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libboost-dev libssl-dev libyaml-cpp-dev)
# Testing on top: Catch2, the Python test drivers, the openssl CLI (test certificates), ...
TEST_PACKAGES=(git python3 python3-pip catch2 openssl python3-yaml
  prometheus  # promtool and a real Prometheus for the deployment test
  clang libclang-rt-dev llvm)  # libFuzzer and its symbolizer for tests/fuzz
APT_PACKAGES=("${BUILD_PACKAGES[@]}")
((build_only)) || APT_PACKAGES+=("${TEST_PACKAGES[@]}")

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ((build_only)); then
  echo "setup: ok (build only)"
  exit 0
fi

# Light reference peers the tests run against: numpy (model references), jinja2 (chat
# templates), tokenizers (HF tokenizers), onnxruntime and onnx (classic models), and the real clients of the serving tests: openai,
# tritonclient[grpc], grpcio(-tools), prometheus_client. torch/transformers are used once, offline, to make the
# committed golden files and are not needed here.
need=()
python3 -c "import numpy" >/dev/null 2>&1 || need+=(numpy)
python3 -c "import jinja2" >/dev/null 2>&1 || need+=(jinja2)
python3 -c "import tokenizers" >/dev/null 2>&1 || need+=(tokenizers)
python3 -c "import openai" >/dev/null 2>&1 || need+=(openai)
python3 -c "import tritonclient.grpc" >/dev/null 2>&1 || need+=("tritonclient[grpc]")
python3 -c "import grpc_tools" >/dev/null 2>&1 || need+=(grpcio-tools)
python3 -c "import prometheus_client" >/dev/null 2>&1 || need+=(prometheus_client)
# JSON-schema constrained decoding: replies are validated with Python's jsonschema.
python3 -c "import jsonschema" >/dev/null 2>&1 || need+=(jsonschema)
# Classic models: onnxruntime runs live against `sampan infer`; onnx builds the bad-file cases.
python3 -c "import onnxruntime" >/dev/null 2>&1 || need+=(onnxruntime)
python3 -c "import onnx" >/dev/null 2>&1 || need+=(onnx)
# GGUF: the `gguf` package writes the test files, `regex` applies the published pre-tokenizer
# patterns, llama-cpp-python (llama.cpp itself, built from source by pip: several minutes the first
# time) quantizes them and gives the reference logits.
python3 -c "import gguf" >/dev/null 2>&1 || need+=(gguf)
python3 -c "import regex" >/dev/null 2>&1 || need+=(regex)
python3 -c "import llama_cpp" >/dev/null 2>&1 || need+=(llama-cpp-python)
if ((${#need[@]})); then
  python3 -m pip install -q "${need[@]}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "${need[@]}"
fi
echo "setup: ok"
