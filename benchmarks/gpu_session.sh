#!/usr/bin/env bash
# One device call, prepared: on a bare CUDA host (wheels from ../shared/gpu/fetch-wheels.sh in
# .whl/, pytest's among them; the image's own torch and numpy kept), the checks most worth a
# lease first, each under `timeout`: the run worker forking CUDA children, `make gpu-check`'s
# tests, both agents' training and the flight recorder, the daemon on the GPU and then on the
# host's CPU (benchmarks/gpu_product_path.sh), then the 100,000-record pool and the
# GPU-against-CPU benchmark. Results under $OUT (tarred as r.tgz after each step, so a call
# cut short still brings back what ran).
#   bash benchmarks/gpu_session.sh          (on the device machine, OUT set)
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
step run-worker-cuda 40 env PYTHONPATH=.:infrastructure:agents python3 benchmarks/run_worker_cuda.py
step gpu-check "${GPU_CHECK_LIMIT:-250}" python3 tests/gpu_check.py --out "$out/r" \
  --only tests,training,flight --budget "${GPU_CHECK_BUDGET:-235}"
step product-cuda 100 bash benchmarks/gpu_product_path.sh "$out/r/product-cuda"
step product-cpu 100 env DEVICE=cpu bash benchmarks/gpu_product_path.sh "$out/r/product-cpu"
mkdir -p "$out/r/vs"
step gpu-vs-cpu "${VS_LIMIT:-110}" python3 tests/gpu_check.py --out "$out/r/vs" --only pool,gpu-vs-cpu \
  --budget "${VS_BUDGET:-100}"
echo "== the checks"; grep -h -E "^(PASS|FAIL|NOT RUN)|^gpu-check|ratio|x the" "$out/r/gpu-check.log" "$out/r/gpu-vs-cpu.log" | cut -c1-400
for f in run-worker-cuda; do echo "== $f"; tail -6 "$out/r/$f.log" | cut -c1-600; done
for d in product-cuda product-cpu; do echo "== $d"; cat "$out/r/$d/serve-exit.txt" 2>/dev/null; done
