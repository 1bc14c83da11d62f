#!/usr/bin/env bash
# A/B on a machine with a GPU: the same models from two (or more) wheel folders (A: before a
# change, B: after), timed by benchmarks/zoo_bench.py in turn, A B A B, each in its own process.
#
#   scripts/ab_bench.sh DIR_A DIR_B MODEL ...        (writes $OUT/ab_{a,b}{1,2}.log)
#   scripts/ab_bench.sh DIR_A DIR_B DIR_C ... -- MODEL ...   (A B C ... twice: ab_{a,b,c,...}{1,2}.log)
#   AB_BENCH=benchmarks/llm_bench.py scripts/ab_bench.sh DIR_A DIR_B [-- --batches 1,8]
#                                               (the LLM decode step: llm_decode and llm_prefill wheels)
set -uo pipefail
cd "$(dirname "$0")/.."
DIRS=()
if [[ " $* " == *" -- "* ]]; then
  while [ "$1" != "--" ]; do DIRS+=("$1"); shift; done; shift
else
  DIRS=("$1" "$2"); shift 2
fi
OUT="${OUT:-/tmp/aotcombo-gpu-out}"; mkdir -p "$OUT"
PY="${PYTHON:-python3}"
BENCH="${AB_BENCH:-benchmarks/zoo_bench.py}"
SIDES=(a b c d e f g h)
for i in "${!DIRS[@]}"; do
  side=${SIDES[$i]}; dir=${DIRS[$i]}
  echo "== $side: $dir"
  rm -rf "/tmp/ab_site_$side"; mkdir -p "/tmp/ab_site_$side"
  names=$(ls "$dir"/*.whl | xargs -n1 basename | cut -d- -f1 | sort -u)
  $PY -m pip install --quiet --no-deps --no-index --find-links "$dir" --target "/tmp/ab_site_$side" $names || exit 1
done
for round in 1 2; do
  for i in "${!DIRS[@]}"; do
    side=${SIDES[$i]}
    echo "== $side (${DIRS[$i]}), round $round"
    mkdir -p "/tmp/ab_out_$side$round"
    PYTHONPATH="/tmp/ab_site_$side:$PWD" PYTHONUNBUFFERED=1 $PY "$BENCH" "$@" --no-compile \
      --out "/tmp/ab_out_$side$round" 2>&1 | grep -v -i warn | tee "$OUT/ab_$side$round.log" | tail -n $(( $# + 2 ))
  done
done
