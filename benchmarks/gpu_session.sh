#!/usr/bin/env bash
# One device call, prepared: on a bare CUDA host (wheels from ../shared/gpu/fetch-wheels.sh in
# .whl/, pytest's among them; the image's own torch and numpy kept), the checks most worth a
# lease, each under `timeout`. Results under $OUT (tarred as r.tgz after each step, so a call
# cut short still brings back what ran). Two parts, a call each (a call runs 600 s at most):
#   bash benchmarks/gpu_session.sh [checks]   the run worker forking CUDA children, `make
#       gpu-check`'s tests, both agents' training and the flight recorder, then the daemon on
#       the GPU and on the host's CPU (benchmarks/gpu_product_path.sh; PRODUCT_CPU=0 skips
#       the CPU's)
#   bash benchmarks/gpu_session.sh speed      benchmarks/gpu_vs_cpu.py at 100,000 records, then
#       one 1,600-step CUDA run on that pool under cProfile: where the host's time goes
#       around each captured replay (its top functions in r/cuda-100k-top.txt)
#   bash benchmarks/gpu_session.sh anatomy    the daemon's runs (benchmarks/run_anatomy.py,
#       serve + run, 200 steps) at ANATOMY_POOL (100,000) records with 25% new, this tree: first
#       issue 90's GPU row (CUDA, the watched run: the third, after a first model on half the
#       pool and a second after a quarter more), then the host's CPU, then the later run (the
#       second) on both; then BASE_TREE (.base, when it is a checkout) the same way for the
#       phases before; then `make gpu-check`'s gpu-marked tests; then the later runs at 10,000
#       and 100,000 records with 1% of the larger new (the ratio's rows), this tree alone
set -u
out=${OUT:?set OUT to a results folder}
mkdir -p "$out/r"
pack() { tar czf "$out/r.tgz" -C "$out" r; }
python3 -m pip install -q --no-index --no-deps $(ls .whl/*.whl | grep -v numpy) \
  && python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 3
export PYTHONUNBUFFERED=1
step() {  # step NAME SECONDS COMMAND...: its output to r/NAME.log, its last lines echoed
  local name=$1 limit=$2; shift 2
  local started=$SECONDS
  timeout "$limit" "$@" > "$out/r/$name.log" 2>&1
  echo "== $name: exit $? in $((SECONDS - started)) s"
  pack
}
worker() { step run-worker-cuda 40 env PYTHONPATH=.:infrastructure:agents python3 benchmarks/run_worker_cuda.py; }
if [ "${1:-checks}" = anatomy ]; then
  pool=${ANATOMY_POOL:-100000} base=${BASE_TREE:-.base}
  anatomy=(python3 benchmarks/run_anatomy.py --steps 200 --new-after)
  step anatomy-25 "${ANATOMY_LIMIT:-240}" "${anatomy[@]}" --pools "$pool" --new 25% \
    --devices cuda,cpu --modes watched,later --out "$out/r/anatomy_25"
  [ -f "$base/genesis_fp16/__main__.py" ] && step anatomy-25-base "${ANATOMY_LIMIT:-220}" \
    "${anatomy[@]}" --pools "$pool" --new 25% --devices cuda,cpu --modes watched \
    --trees "$base" --out "$out/r/anatomy_25_base"
  step gpu-tests "${TESTS_LIMIT:-150}" python3 tests/gpu_check.py --out "$out/r" --only tests \
    --budget "$(( ${TESTS_LIMIT:-150} - 10 ))"
  step anatomy-1 "${ANATOMY_1_LIMIT:-180}" "${anatomy[@]}" --modes later \
    --pools "$((pool / 10)),$pool" --new "$((pool / 100))" --out "$out/r/anatomy_1"
  for f in "$out"/r/anatomy_*.md; do echo "== $f"; grep -E '^\| [0-9a-f]{7,}' "$f" | cut -c1-400; done
  echo "== gpu tests"; grep -h -E "^(PASS|FAIL|NOT RUN)|^gpu-check" "$out/r/gpu-tests.log" | cut -c1-400
  exit 0
fi
if [ "${1:-checks}" = speed ]; then
  pools=/tmp/gpu-session-pools
  step gpu-vs-cpu 230 python3 benchmarks/gpu_vs_cpu.py --records 100000 --pool-dir "$pools" \
    --json "$out/r/gpu_vs_cpu.json"
  pool=$(find "$pools" -type d -name se_darwin | head -1)
  state=$(mktemp -d)  # a short run first reads the pool and calibrates: the profile is steps
  step warm-cuda-100k 60 env GENESIS_FP16_STATE_DIR="$state" python3 -m genesis_fp16 train \
    se_darwin --data "$pool" --steps 8 --device cuda --checkpoint-dir "$state/ck-warm" --json
  step profile-cuda-100k 120 env GENESIS_FP16_STATE_DIR="$state" python3 -m cProfile \
    -o "$out/r/cuda-100k.prof" -m genesis_fp16 train se_darwin --data "$pool" --steps 1600 \
    --device cuda --checkpoint-dir "$state/ck-profile" --json
  python3 -c 'import pstats, sys; pstats.Stats(sys.argv[1]).sort_stats("tottime").print_stats(40)' \
    "$out/r/cuda-100k.prof" > "$out/r/cuda-100k-top.txt" 2>&1
  worker
  pack
  tail -8 "$out/r/gpu-vs-cpu.log" | cut -c1-400; head -60 "$out/r/cuda-100k-top.txt" | cut -c1-200
  exit 0
fi
worker
step gpu-check "${GPU_CHECK_LIMIT:-320}" python3 tests/gpu_check.py --out "$out/r" \
  --only tests,training,flight --budget "${GPU_CHECK_BUDGET:-300}"
step product-cuda 100 bash benchmarks/gpu_product_path.sh "$out/r/product-cuda"
[ "${PRODUCT_CPU:-1}" = 1 ] && step product-cpu 100 env DEVICE=cpu bash benchmarks/gpu_product_path.sh "$out/r/product-cpu"
echo "== the checks"; grep -h -E "^(PASS|FAIL|NOT RUN)|^gpu-check" "$out/r/gpu-check.log" | cut -c1-400
echo "== run-worker-cuda"; tail -6 "$out/r/run-worker-cuda.log" | cut -c1-600
for d in product-cuda product-cpu; do echo "== $d"; cat "$out/r/$d/serve-exit.txt" 2>/dev/null; done
