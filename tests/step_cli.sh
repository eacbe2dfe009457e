#!/usr/bin/env bash
# step_cli.sh CASE EXE: command-line tests of an attention step that depend on what the step
# declares (StepInfo::attn_rule, a backward or not). The facts are asked of EXE itself, without a
# device: a problem it accepts gets as far as "no CUDA device" (exit 3), one it refuses exits 2
# with "does not support". The test then checks that the answers agree with each other and with
# --help, so that a step's refusals stay consistent and clearly worded, whatever the step.
#   dtype=T    T (f32, f16, bf16) is accepted, or refused with a reason; the default --help names
#              is accepted; a refused type is refused by --sweep (and --bwd) as well
#   head_dim   the accepted head dims form one rule, "a multiple of m, at most M", 64 included;
#              every other one is refused with a reason
#   bwd        --bwd is accepted (and by --sweep) or refused as "no backward pass"
#   kv_heads   --kv-heads equal to --heads is accepted; one that does not divide it is refused; a
#              divisor below it (GQA, MQA) is accepted or refused as "no grouped-query attention",
#              as --help says; --sweep --kv-heads 8 likewise
set -u
case_=$1 exe=$2
small=(--batch 1 --heads 1 --seq 64)
fail() { echo "FAIL: $*"; exit 1; }

# probe ARGS...: sets r to "yes" (accepted), "no" (refused; the message in $reason) or "error".
probe() {
  local out rc
  out=$(CUDA_VISIBLE_DEVICES=-1 "$exe" "$@" 2>&1)
  rc=$?
  reason=$(grep -m1 -i "error" <<< "$out")
  if [[ $rc == 3 ]] && grep -q "no CUDA device" <<< "$out"; then
    r=yes
  elif [[ $rc == 2 ]]; then
    r=no
  else
    echo "unexpected exit $rc from: $(basename "$exe") $*"
    printf '%s\n' "$out" | head -n 5
    r=error
  fi
}

case $case_ in
  dtype=*)
    t=${case_#dtype=}
    default=$("$exe" --help | grep -Eo -m1 "default (f32|f16|bf16)" | cut -d' ' -f2)
    [[ -n $default ]] || fail "--help names no default element type (expected 'default f32|f16|bf16')"
    probe "${small[@]}" --dtype "$t"
    [[ $r == error ]] && fail "--dtype $t: neither accepted nor refused"
    echo "--dtype $t: $( [[ $r == yes ]] && echo accepted || echo "refused: $reason") (default $default)"
    if [[ $t == "$default" && $r != yes ]]; then fail "the default element type $t is refused"; fi
    if [[ $r == no ]]; then
      grep -Eq "does not support|is not one of" <<< "$reason" ||
        fail "the refusal of --dtype $t gives no reason ('does not support ...' or '--dtype: ... is not one of ...')"
      probe --sweep --dtype "$t"; [[ $r == no ]] || fail "--sweep --dtype $t is not refused"
      grep -Eq "supports none|is not one of" <<< "$reason" ||
        fail "--sweep --dtype $t: expected 'supports none of the --sweep problems' or '--dtype: ... is not one of'"
      if probe "${small[@]}" --bwd; [[ $r == yes ]]; then
        probe "${small[@]}" --bwd --dtype "$t"; [[ $r == no ]] || fail "--bwd --dtype $t is accepted, --dtype $t is not"
      fi
    else
      probe --sweep --dtype "$t"; [[ $r == yes ]] || fail "--dtype $t is accepted, --sweep --dtype $t is not: $reason"
    fi
    ;;
  head_dim)
    dims=(1 4 8 40 60 64 66 96 100 128 136 256 1024)
    declare -A ok
    max=0 g=0
    gcd() { local a=$1 b=$2; while ((b)); do local t=$((a % b)); a=$b b=$t; done; echo "$a"; }
    for d in "${dims[@]}"; do
      probe "${small[@]}" --head-dim "$d"
      [[ $r == error ]] && fail "--head-dim $d: neither accepted nor refused"
      ok[$d]=$r
      if [[ $r == yes ]]; then
        ((d > max)) && max=$d
        g=$(gcd "$g" "$d")
      else
        grep -q "does not support" <<< "$reason" || fail "--head-dim $d is refused without a reason: $reason"
      fi
    done
    [[ ${ok[64]} == yes ]] || fail "--head-dim 64 (the default problem's) is refused"
    echo "head_dim: a multiple of $g, at most $max (probed: ${dims[*]})"
    for d in "${dims[@]}"; do
      want=no
      ((d <= max && d % g == 0)) && want=yes
      [[ ${ok[$d]} == "$want" ]] || fail "--head-dim $d is $([[ ${ok[$d]} == yes ]] && echo accepted || echo refused), which breaks that rule"
    done
    ;;
  bwd)
    probe "${small[@]}" --bwd
    [[ $r == error ]] && fail "--bwd: neither accepted nor refused"
    if [[ $r == yes ]]; then
      echo "--bwd: accepted (the step has a backward)"
      probe --sweep --bwd; [[ $r == yes ]] || fail "--bwd is accepted, --sweep --bwd is not: $reason"
    else
      echo "--bwd: refused: $reason"
      grep -q "no backward" <<< "$reason" || fail "the refusal of --bwd does not say the step has no backward pass"
    fi
    ;;
  kv_heads)
    heads=(--batch 1 --heads 8 --seq 64)
    probe "${heads[@]}" --kv-heads 8
    [[ $r == yes ]] || fail "--kv-heads 8 with 8 heads (MHA) is not accepted: $reason"
    probe "${heads[@]}" --kv-heads 3
    [[ $r == no ]] && grep -q "must be a multiple of the K/V heads" <<< "$reason" ||
      fail "--kv-heads 3 with 8 heads is not refused as 'must be a multiple of the K/V heads': $reason"
    only_mha=no
    "$exe" --help | grep -A1 -- "--kv-heads" | grep -q "runs only the default" && only_mha=yes
    for kvh in 2 1; do
      probe "${heads[@]}" --kv-heads "$kvh"
      [[ $r == error ]] && fail "--kv-heads $kvh: neither accepted nor refused"
      if [[ $only_mha == yes ]]; then
        [[ $r == no ]] && grep -q "no grouped-query attention" <<< "$reason" ||
          fail "--help says MHA only, but --kv-heads $kvh is not refused as 'no grouped-query attention': $reason"
      else
        [[ $r == yes ]] || fail "--help offers --kv-heads, but --kv-heads $kvh with 8 heads is refused: $reason"
      fi
    done
    # --sweep --kv-heads 8: the benchmark shapes with 8 K/V heads, none of which an MHA-only step runs
    probe --sweep --kv-heads 8
    if [[ $only_mha == yes ]]; then
      [[ $r == no ]] && grep -q "supports none of the --sweep problems" <<< "$reason" ||
        fail "--sweep --kv-heads 8 is not refused as 'supports none of the --sweep problems': $reason"
    else  # accepted, or a step with its own benchmark shapes (16: decoding) that name their K/V heads
      [[ $r == yes ]] || grep -q "names its own K/V heads" <<< "$reason" || fail "--sweep --kv-heads 8 is refused: $reason"
    fi
    echo "--kv-heads: $([[ $only_mha == yes ]] && echo "MHA only, GQA refused" || echo "GQA and MQA accepted")"
    ;;
  *) fail "step_cli.sh: unknown case '$case_'" ;;
esac
echo "ok"
