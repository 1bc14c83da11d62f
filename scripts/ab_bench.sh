#!/usr/bin/env bash
# A/B on the device machine: the same models from two wheel folders (A: before a change, B:
# after), timed by benchmarks/zoo_bench.py in turn, A B A B, each in its own process.
#
#   scripts/ab_bench.sh DIR_A DIR_B MODEL ...   (writes $OUT/ab_{a,b}{1,2}.log)
#   AB_BENCH=benchmarks/llm_bench.py scripts/ab_bench.sh DIR_A DIR_B [--batches 1,8]
#                                               (the LLM decode step: llm_decode and llm_prefill wheels)
set -uo pipefail
cd "$(dirname "$0")/.."
A="$1"; B="$2"; shift 2
OUT="${OUT:-/tmp/aotcombo-gpu-out}"; mkdir -p "$OUT"
PY="${PYTHON:-python3}"
BENCH="${AB_BENCH:-benchmarks/zoo_bench.py}"
for side in a b; do
  dir=$([ $side = a ] && echo "$A" || echo "$B")
  mkdir -p "/tmp/ab_site_$side"
  names=$(ls "$dir"/*.whl | xargs -n1 basename | cut -d- -f1 | sort -u)
  $PY -m pip install --quiet --no-deps --no-index --find-links "$dir" --target "/tmp/ab_site_$side" $names || exit 1
done
for round in 1 2; do
  for side in a b; do
    echo "== $side, round $round"
    mkdir -p "/tmp/ab_out_$side$round"
    PYTHONPATH="/tmp/ab_site_$side:$PWD:$PWD/tests" PYTHONUNBUFFERED=1 $PY "$BENCH" "$@" --no-compile \
      --out "/tmp/ab_out_$side$round" 2>&1 | grep -v -i warn | tee "$OUT/ab_$side$round.log" | tail -n $(( $# + 2 ))
  done
done
