#!/usr/bin/env bash
# The README's main job: set up, build, make the demo model, and run it on the CPU.
# The demo model is a small random-weight Llama-3-style model (GQA, llama3 RoPE scaling, tied
# embeddings, bf16) made by tests/reference/make_tiny_models.py; it has no tokenizer yet, so the
# job runs token ids through it (text generation arrives with the tokenizer issue).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh Release build
demo="${SAMPAN_DEMO_DIR:-build/demo-models}"
if [ ! -f "$demo/tiny_llama3/config.json" ]; then
  python3 tests/reference/make_tiny_models.py --out-dir "$demo"
fi
./build/sampan info --model "$demo/tiny_llama3"
./build/sampan logits --model "$demo/tiny_llama3" --ids 1,15,42,7,300,12 --out build/demo-logits.npy
python3 - <<'PY'
import numpy as np
x = np.load("build/demo-logits.npy")
print(f"logits: shape {x.shape}, next-token argmax per position {x.argmax(1).tolist()}")
PY
./build/sampan bench --model "$demo/tiny_llama3" --prompt-len 64 --gen 16 --repeat 2
