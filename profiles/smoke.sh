#!/usr/bin/env bash
# profiles/smoke.sh: a step's first run on a GPU, where a hang must cost seconds, not a device call.
# Runs --check on a fixed list of small and edge shapes, each under `timeout`, for every variant of
# the step, and prints one line per run (PASS, FAIL, HANG, REFUSED) and a count at the end.
#
#   bash profiles/smoke.sh [--bin DIR] [--timeout S] STEP [VARIANT...]
#
# STEP is a number or a name (DIR/NN_name, DIR default build/bin); the VARIANTs default to every
# variant the step's --help lists. Shapes: attention steps with a backward get --bwd and the shapes
# below (head_dim 64 and 128, causal, ragged lengths, seq_q != seq_k both ways, GQA, a 5x3 toy);
# decoding steps (--cache-lens in --help) get ragged caches, GQA and MQA; others their default
# problem. A run that exits 2 with "error:" (a refusal, e.g. a variant that does not run GQA) is
# REFUSED, not a failure. Exit status: 0 if every run passed or was refused, 1 otherwise, 2 bad usage.
# Typical use on a fresh device, prebuilt binaries carried in gpu_out/bin while the device builds:
#   bash profiles/smoke.sh --bin gpu_out/bin --timeout 30 25
set -uo pipefail

usage() { sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
bin=build/bin limit=30 args=()
while (($#)); do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --bin) (($# > 1)) || { echo "smoke.sh: --bin needs a folder" >&2; exit 2; }; bin=$2; shift ;;
    --timeout) (($# > 1)) && [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "smoke.sh: --timeout needs whole seconds" >&2; exit 2; }
      limit=$2; shift ;;
    -*) echo "smoke.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) args+=("$1") ;;
  esac
  shift
done
((${#args[@]})) || { usage >&2; echo "smoke.sh: name a step" >&2; exit 2; }
step=${args[0]}
[[ $step =~ ^[0-9]$ ]] && step=0$step
exe=$(ls "$bin"/"$step"_* "$bin"/"$step" 2> /dev/null | head -1)
[[ -n $exe && -x $exe ]] || { echo "smoke.sh: no step '$step' in $bin" >&2; exit 2; }
help=$("$exe" --help 2>&1)
variants=("${args[@]:1}")
if ((${#variants[@]} == 0)); then
  line=$(grep -E '^\s*--variant' <<< "$help" | head -1)
  if [[ $line =~ \(([a-z0-9|-]+)\)$ ]]; then IFS='|' read -r -a variants <<< "${BASH_REMATCH[1]}"; else variants=(""); fi
fi

if grep -qE '^\s*--cache-lens ' <<< "$help"; then  # a decoding step: the flag is only offered where there is a cache
  shapes=("--batch 4 --heads 8 --kv-heads 2 --seq-k 2048 --cache-lens 0,5,2048,1"
          "--batch 4 --heads 8 --kv-heads 2 --seq-k 2048 --cache-lens 64,1,2048,1000 --causal"
          "--batch 2 --heads 16 --kv-heads 1 --seq-q 3 --seq-k 1500 --cache-lens 1500,3 --causal --dtype bf16"
          "--batch 1 --heads 32 --kv-heads 1 --seq-k 20000 --cache-lens 19999")
  grep -q -- '--page-size' <<< "$help" && for i in "${!shapes[@]}"; do shapes[i]+=" --page-size 7"; done
  mode=""
elif grep -qE '^\s*--bwd +also check' <<< "$help"; then  # a step with a backward
  shapes=("--batch 1 --heads 1 --seq 256 --head-dim 64" "--head-dim 64 --batch 2 --heads 4 --seq 1024"
          "--head-dim 128 --batch 2 --heads 4 --seq 1024 --causal" "--head-dim 64 --seq 1000 --causal --dtype bf16"
          "--head-dim 128 --seq 1000 --dtype bf16" "--head-dim 64 --seq-q 700 --seq-k 1500 --heads 8 --kv-heads 2"
          "--head-dim 128 --seq-q 1500 --seq-k 333 --causal" "--head-dim 64 --batch 5 --heads 3 --seq 5")
  mode="--bwd"
else
  shapes=("")
  mode=""
fi

pass=0 bad=0 refused=0
for v in "${variants[@]}"; do
  for s in "${shapes[@]}"; do
    # shellcheck disable=SC2086  # the shape: several words
    out=$(timeout "$limit" "$exe" --check --seed 11 $mode $s ${v:+--variant $v} 2>&1)
    rc=$?
    if ((rc == 3 || rc == 4)); then  # no device, or not the GPU the step needs: nothing here can run
      echo "smoke.sh: $(grep -m1 '^error:' <<< "$out")"
      exit 1
    fi
    if ((rc == 0)); then
      what=PASS pass=$((pass + 1))
    elif ((rc == 124 || rc == 137)); then
      what="HANG (no exit in ${limit} s)" bad=$((bad + 1))
    elif ((rc == 2)) && grep -q '^error:' <<< "$out"; then
      what="REFUSED: $(grep -m1 '^error:' <<< "$out")" refused=$((refused + 1))
    else
      what="FAIL (exit $rc): $(grep -m1 -E 'FAIL|error' <<< "$out")" bad=$((bad + 1))
    fi
    printf '%-12s %-78s %s\n' "${v:-default}" "${s:-(default problem)}" "$what"
  done
done
echo "smoke.sh $(basename "$exe"): $pass passed, $refused refused, $bad failed or hung"
((bad == 0))
