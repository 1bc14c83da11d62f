#!/usr/bin/env bash
# The whole GPU check in one call, on the device machine (no network, its own
# torch and triton): install the wheels built on the GPU-less machine into a
# private folder, then run every GPU test and the GPU report.
#
#   scripts/gpu_check.sh [WHEEL_DIR]      (default: .carry/wheels)
#
# From the build machine, with the device tool:
#   run(command="bash scripts/gpu_check.sh", carry=[".carry"])
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS="${1:-.carry/wheels}"
OUT="${OUT:-/tmp/aotcombo-gpu-out}"
mkdir -p "$OUT"
SITE="$(mktemp -d)"
PY="${PYTHON:-python3}"

echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
$PY -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__)'

echo "== install $(ls "$WHEELS"/*.whl | wc -l) wheels (no deps, no index)"
$PY -m pip install --quiet --no-deps --no-index --target "$SITE" "$WHEELS"/*.whl || exit 1
$PY - "$SITE" <<'PY'
import subprocess, sys
site = sys.argv[1]
code = "import sys, importlib, time; t=time.perf_counter(); import branches; print(f'import branches: {1e3*(time.perf_counter()-t):.1f} ms;', 'triton' in sys.modules and 'TRITON IMPORTED' or 'no triton', 'jinja2' in sys.modules and 'JINJA2 IMPORTED' or 'no jinja2')"
subprocess.run([sys.executable, "-c", "import torch; " + code], env={"PYTHONPATH": site, "PATH": "/usr/bin:/bin"})
PY

echo "== pytest -m gpu"
PYTHONPATH="$SITE:$PWD" AOTCOMBO_REQUIRE_PACKAGES=1 PYTHONUNBUFFERED=1 \
  $PY -m pytest -m gpu tests/test_gpu_*.py tests/test_runtime.py -q -s -rA -p no:cacheprovider 2>&1 | tee "$OUT/gpu_pytest.log"
status=${PIPESTATUS[0]}
exit $status
