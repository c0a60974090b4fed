#!/usr/bin/env bash
# The product's own commands on a CUDA host, on the built-in agents' sample data: the
# daemon (`genesis-fp16 serve`, defaults) until both agents have served a model and the
# next runs were judged, its /metrics, status page and `status`; then `train se_darwin
# --device cuda --json` twice into one state folder (the second is up to date from the
# data manifest: no read, no calibration). Results under OUT (default: ./gpu-product).
# DEVICE=cpu runs the same on the host's CPU (what the GPU is compared with).
#   bash benchmarks/gpu_product_path.sh [OUT]
set -uo pipefail
out=${1:-gpu-product}
device=${DEVICE:-cuda}
mkdir -p "$out"
state=$(mktemp -d)
export GENESIS_FP16_STATE_DIR="$state/serve" GENESIS_FP16_SCHEDULE=20 GENESIS_FP16_DEVICE=$device
genesis-fp16 serve > "$out/serve.log" 2>&1 &
daemon=$!
ok=0
for _ in $(seq 1 150); do
  sleep 1
  done_runs=$(grep -c 'training run finished' "$out/serve.log")
  if [ "$done_runs" -ge 4 ]; then ok=1; break; fi
done
fetch() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' "$1"; }
fetch http://127.0.0.1:9464/metrics > "$out/metrics.txt"
fetch http://127.0.0.1:9464/ > "$out/page.html"
genesis-fp16 status > "$out/status.txt" 2>&1
kill -TERM "$daemon"; wait "$daemon"; echo "serve exit $? (4 runs finished: $ok)" > "$out/serve-exit.txt"
export GENESIS_FP16_STATE_DIR="$state/train"
for n in 1 2; do
  genesis-fp16 train se_darwin --device "$device" --seed 1 --json > "$out/train$n.json" 2> "$out/train$n.err"
  echo "train $n exit $?" >> "$out/serve-exit.txt"
done
grep -h "training run finished" "$out/serve.log" > "$out/runs.txt"
