#!/usr/bin/env bash
# One device call, prepared: on a bare CUDA host (wheels from ../shared/gpu/fetch-wheels.sh in
# .whl/, the image's own torch and numpy kept), `make gpu-check`'s script, then the quick GPU
# checks its pieces do not cover, each under `timeout`, most valuable first. Results under
# $OUT (tarred as r.tgz after each step, so a call cut short still brings back what ran).
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
step gpu-check "${GPU_CHECK_LIMIT:-360}" python3 tests/gpu_check.py --out "$out/r" --budget "${GPU_CHECK_BUDGET:-340}"
step run-worker-cuda 40 env PYTHONPATH=.:infrastructure:agents python3 benchmarks/run_worker_cuda.py
step calibration-cost 60 python3 benchmarks/calibration_cost.py --device cuda --out "$out/r/calibration_cost_cuda.json"
step range-stats-cost 60 python3 benchmarks/range_stats_cost.py --device cuda --pairs 5 --out "$out/r"
echo "== the checks"; grep -E "^(PASS|FAIL|NOT RUN)|^gpu-check|ratio|x the" "$out/r/gpu-check.log" | cut -c1-400
for f in run-worker-cuda calibration-cost range-stats-cost; do echo "== $f"; tail -6 "$out/r/$f.log" | cut -c1-600; done
