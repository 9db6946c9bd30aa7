#!/usr/bin/env bash
# The README's main job: set up, build, make the demo model, generate text with it on the CPU,
# then serve it: `sampan serve` on HTTP port 8000 (OpenAI-compatible + KServe v2 REST,
# /metrics) and gRPC port 8001 until Ctrl-C (SAMPAN_QUICKSTART_SERVE=0 skips the server).
# The demo model (scripts/make_demo_model.py) is a small LlamaForCausalLM with the real Llama 2
# SentencePiece tokenizer whose weights are fitted in seconds to bigram statistics of English
# text (Python standard-library docstrings): it writes corpus words in plausible order, it does
# not understand anything. Its attention/MLP blocks run but their output projections are zero.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh Release build
demo="${SAMPAN_DEMO_DIR:-build/demo-model}"
if [ ! -f "$demo/config.json" ]; then
  python3 scripts/make_demo_model.py --tokenizer-dir tests/data/tokenizers/llama-spm --out "$demo"
fi
./build/sampan info --model "$demo"
echo "== sampan run --model $demo --prompt 'Return a new list of' --max-tokens 40 --seed 5"
./build/sampan run --model "$demo" --prompt "Return a new list of" --max-tokens 40 --seed 5 \
  --temperature 0.7 --top-p 0.9 --min-p 0.05 --stats
echo "== sampan chat (two turns from stdin)"
printf 'Hello!\nHow do I open a file?\n' |
  ./build/sampan chat --model "$demo" --max-tokens 30 --seed 2 --temperature 0.7 --min-p 0.05 --stats
if [ "${SAMPAN_QUICKSTART_SERVE:-1}" != "0" ]; then
  cat <<EOT
== sampan serve --model $demo  (Ctrl-C stops it gracefully). Try, from another shell:
   curl -s localhost:8000/v1/completions -H 'Content-Type: application/json' \\
     -d '{"prompt": "Return a new list of", "max_tokens": 30, "temperature": 0}'
   curl -sN localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \\
     -d '{"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 30, "stream": true}'
   curl -s localhost:8000/metrics | grep '^sampan:'
EOT
  exec ./build/sampan serve --model "$demo" --http-port "${SAMPAN_HTTP_PORT:-8000}" \
    --grpc-port "${SAMPAN_GRPC_PORT:-8001}"
fi
