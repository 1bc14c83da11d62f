#!/usr/bin/env bash
# The whole GPU check in one call, on a machine with a GPU (no network needed; its own
# torch and triton): install the wheels built on the GPU-less machine into a
# private folder, then run every GPU test and the GPU report.
#
#   scripts/gpu_check.sh [WHEEL_DIR ...]  (default: those of .carry/wheels, .carry/combo,
#                                          .carry/zoo* that exist: scripts/build_wheels.py,
#                                          build_combo_tests.py, build_zoo.py make them)
#   AOTCOMBO_GPU_TESTS=0    skip the tests (measure only)
#   AOTCOMBO_GPU_TEST_FILES="tests/gpu/test_gpu_zoo.py ..."  run these test files only (default: tests/gpu)
#   AOTCOMBO_ZOO="bert gpt2 ..."  the zoo models to check (default: all of sample_models/zoo; MODEL@BATCH: one
#                           built at another batch size by scripts/build_zoo.py MODEL@BATCH)
#   AOTCOMBO_GPU_MEASURE=0  skip the measurements (launch overhead, batch sizes, cold start)
#   AOTCOMBO_FIRST_OUTPUT="transformer_block bert ..."  models for the time to first output (default transformer_block)
#   AOTCOMBO_ZOO_BENCH=1    also time the zoo (benchmarks/zoo_bench.py) against eager and reduce-overhead
#                           (AOTCOMBO_ZOO names the models; samples may be named there too;
#                           AOTCOMBO_ZOO_BENCH_ARGS="--no-compile" leaves reduce-overhead out)
#   AOTCOMBO_LLM_BENCH=1    also time the LLM decode sample (benchmarks/llm_bench.py; .carry/llm)
#   AOTCOMBO_PROFILE="llama_block ..."  also print each kernel's GPU time per forward (benchmarks/kernel_profile.py)
#   AOTCOMBO_MEMCHECK=1     also run compute-sanitizer memcheck on one call of each sample
#
# Run on a machine with a GPU, from a checkout holding the wheel folders (the zoo's wheels may
# be split over several .carry/zoo* folders).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ $# -gt 0 ]; then DIRS=("$@"); else DIRS=(); for d in .carry/wheels .carry/combo .carry/zoo* .carry/llm; do [ -d "$d" ] && DIRS+=("$d"); done; fi
OUT="${OUT:-/tmp/aotcombo-gpu-out}"
mkdir -p "$OUT"
SITE="$(mktemp -d)"
PY="${PYTHON:-python3}"

echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
$PY -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__)'

WHEELS=$(for d in "${DIRS[@]}"; do ls "$d"/*.whl; done)
NAMES="$(echo "$WHEELS" | xargs -n1 basename | cut -d- -f1 | sort -u)"
echo "== install $(echo "$NAMES" | wc -l) packages from $(echo "$WHEELS" | wc -l) wheels in ${DIRS[*]} (pip picks each one's wheel; no deps, no index)"
$PY -m pip install --quiet --no-deps --no-index $(printf -- "--find-links %s " "${DIRS[@]}") --target "$SITE" $NAMES || exit 1
$PY - "$SITE" <<'PY'
import os, subprocess, sys
site = sys.argv[1]
if not os.path.isdir(os.path.join(site, "branches")):
    sys.exit(0)
code = "import sys, importlib, time; t=time.perf_counter(); import branches; print(f'import branches: {1e3*(time.perf_counter()-t):.1f} ms;', 'triton' in sys.modules and 'TRITON IMPORTED' or 'no triton', 'jinja2' in sys.modules and 'JINJA2 IMPORTED' or 'no jinja2')"
subprocess.run([sys.executable, "-c", "import torch; " + code], env={"PYTHONPATH": site, "PATH": "/usr/bin:/bin"})
PY

status=0
if [ "${AOTCOMBO_GPU_TESTS:-1}" = 1 ]; then
  echo "== pytest -m gpu"
  PYTHONPATH="$SITE:$PWD" AOTCOMBO_REQUIRE_PACKAGES=1 PYTHONUNBUFFERED=1 \
    $PY -m pytest -m gpu ${AOTCOMBO_GPU_TEST_FILES:-tests/gpu} -q -s -rfE -p no:cacheprovider 2>&1 | tee "$OUT/gpu_pytest.log"
  status=${PIPESTATUS[0]}
fi

if [ "${AOTCOMBO_GPU_MEASURE:-1}" = 1 ]; then
  echo "== launch overhead"
  PYTHONPATH="$SITE" $PY benchmarks/launch_overhead.py --out "$OUT/launch_overhead.json" 2>&1 | tee "$OUT/launch_overhead.log"
  echo "== several batch sizes: buckets against a dynamic batch"
  PYTHONPATH="$SITE:$PWD" PYTHONUNBUFFERED=1 $PY benchmarks/shapes_bench.py --out "$OUT" 2>&1 | tee "$OUT/shapes_bench.log"
  echo "== time to first output (in-process, fresh processes): ours against eager"
  PYTHONPATH="$SITE:$PWD" $PY benchmarks/first_output.py ${AOTCOMBO_FIRST_OUTPUT:-transformer_block} --repeats 5 --out "$OUT" 2>&1 | tee "$OUT/first_output.log"
fi
if [ "${AOTCOMBO_ZOO_BENCH:-0}" = 1 ]; then
  echo "== zoo benchmark: eager, reduce-overhead, ours default and static"
  PYTHONPATH="$SITE:$PWD" PYTHONUNBUFFERED=1 $PY benchmarks/zoo_bench.py ${AOTCOMBO_ZOO:-} ${AOTCOMBO_ZOO_BENCH_ARGS:-} --out "$OUT" 2>&1 | tee "$OUT/zoo_bench.log"
fi
if [ "${AOTCOMBO_LLM_BENCH:-0}" = 1 ]; then
  echo "== LLM decode: per-token latency and bandwidth"
  PYTHONPATH="$SITE:$PWD" PYTHONUNBUFFERED=1 $PY benchmarks/llm_bench.py --out "$OUT" 2>&1 | tee "$OUT/llm_bench.log"
fi
if [ -n "${AOTCOMBO_PROFILE:-}" ]; then
  echo "== GPU time per kernel, op by op"
  PYTHONPATH="$SITE:$PWD" PYTHONUNBUFFERED=1 $PY benchmarks/kernel_profile.py $AOTCOMBO_PROFILE 2>&1 | tee "$OUT/kernel_profile.log"
  if [ "${AOTCOMBO_LLM_BENCH:-0}" = 1 ]; then
    PYTHONPATH="$SITE:$PWD" PYTHONUNBUFFERED=1 $PY benchmarks/llm_bench.py --profile 2>&1 | tee -a "$OUT/kernel_profile.log"
  fi
fi
if [ "${AOTCOMBO_MEMCHECK:-0}" = 1 ]; then
  echo "== compute-sanitizer memcheck, one call per sample package"
  SAN="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  for p in branches transformer_block adam_step conv_block transformer_block_dynamic conv_block_buckets; do
    PYTHONPATH="$SITE" PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$SAN" --tool memcheck --error-exitcode 9 $PY benchmarks/one_call.py "$p" --mode op_by_op || status=9
    PYTHONPATH="$SITE" "$SAN" --tool memcheck --error-exitcode 9 $PY benchmarks/one_call.py "$p" --mode graph || status=9
  done
fi
exit $status
