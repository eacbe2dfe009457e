#!/usr/bin/env bash
# profiles/capture.sh: Nsight Compute's fixed metric panel for one launch of each named step's
# kernels, on the step's fixed shapes of profiles/ncu_shapes.txt.
#
#   bash profiles/capture.sh 05 06            # steps by number (or name); 'all': every built step
#   bash profiles/capture.sh --out DIR all    # write DIR/NN_name/... instead of profiles/<gpu>/NN_name/
#
# For every (step, shape) line of ncu_shapes.txt: builds first (every CUDA file has -lineinfo), then
#   ncu --clock-control none --profile-from-start off --section SpeedOfLight ... --metrics <panel>
#       build/bin/NN_name --profile <flags>
# which profiles exactly one launch of the step after one warm-up launch (--profile brackets it with
# cudaProfilerStart/Stop), every kernel of it. A line with --bwd profiles the backward, and is skipped
# for an executable without one (`--bwd --device-info` exits 2 there). Writes, per step:
#   profiles/<gpu>/NN_name/metrics.csv         the panel, one row per (shape, kernel)
#   profiles/<gpu>/NN_name/speed_of_light.txt  ncu's SpeedOfLight section as text, per shape
#   profiles/<gpu>/NN_name/ncu_raw.csv         every collected metric (ncu --page raw --csv), per shape
# <gpu> is the short device name (h100, h200, a100, ...). A panel metric this ncu or GPU does not
# know is dropped from the request (said once) and its column left empty. A line of ncu_shapes.txt
# may name the kernels to profile, 'NN_name kernels=REGEX <flags>' (ncu --kernel-name-base demangled
# --kernel-name regex:REGEX, e.g. kernels=step09:: for the kernels of namespace step09); where the
# filter matches no kernel, the line is captured again without it (and says so). A line marked
# 'source' ('NN_name source <flags>') also collects ncu's SourceCounters section: the warp-state
# samples per SASS instruction, added up per instruction group (FFMAs by the registers they read,
# shared loads, the rest) with the executable's SASS (cuobjdump -sass) into
#   profiles/<gpu>/NN_name/source_stalls.csv  (fa_profiles.py source-stalls; read by results.py)
#
# Options: --out DIR, --no-build (use build/ as it is), --reports DIR (keep the .ncu-rep files there,
# for the Nsight Compute GUI; not committed), --list (print the shapes and exit), -h/--help.
# Exit status: 0 all captured, 1 some capture failed (the others are still written), 2 bad usage,
# 3 no ncu or no GPU.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
die() { echo "capture.sh: $1" >&2; exit "${2:-2}"; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
FP="$PY profiles/fa_profiles.py"

out="" build=1 reports="" list=0 args=()
while (($#)); do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --out) (($# > 1)) || die "--out needs a folder"; out=$2; shift ;;
    --reports) (($# > 1)) || die "--reports needs a folder"; reports=$2; shift ;;
    --no-build) build=0 ;;
    --list) list=1 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) args+=("$1") ;;
  esac
  shift
done
if ((list)); then
  grep -v '^\s*#' profiles/ncu_shapes.txt | grep -v '^\s*$'
  exit 0
fi
((${#args[@]})) || { usage >&2; die "name at least one step (e.g. 05), or 'all'"; }

command -v "$PY" > /dev/null || die "$PY not found (needed to write metrics.csv)" 3
command -v ncu > /dev/null || die "ncu (Nsight Compute) not found on PATH; it ships with the CUDA Toolkit (e.g. /usr/local/cuda/bin)" 3

if ((build)); then
  echo "== build (cmake --build build)"
  if [[ ! -f build/build.ninja ]]; then
    cmake --preset default > /tmp/capture_configure.log 2>&1 || { tail -20 /tmp/capture_configure.log; die "configure failed" 1; }
  fi
  cmake --build build > /tmp/capture_build.log 2>&1 || { grep -E -A5 "error" /tmp/capture_build.log | head -40; die "build failed (log: /tmp/capture_build.log)" 1; }
fi

# The steps: numbers or names -> build/bin/NN_name.
steps=()
for a in "${args[@]}"; do
  if [[ $a == all ]]; then
    for exe in build/bin/[0-9][0-9]_*; do [[ -x $exe ]] && steps+=("$(basename "$exe")"); done
    continue
  fi
  [[ $a =~ ^[0-9]$ ]] && a=0$a
  match=(build/bin/"$a"_* build/bin/"$a")
  found=""
  for exe in "${match[@]}"; do [[ -x $exe && $(basename "$exe") =~ ^[0-9][0-9]_ ]] && found=$(basename "$exe"); done
  [[ -n $found ]] || die "no step '$a' in build/bin (built: $(cd build/bin 2> /dev/null && echo [0-9][0-9]_*))"
  steps+=("$found")
done
((${#steps[@]})) || die "no step executable in build/bin (build first)" 1

# The device: its short name names the output folder.
info=$("build/bin/${steps[0]}" --device-info 2>&1) || die "no usable GPU: $(tail -1 <<< "$info")" 3
gpu_name=$(sed -n 's/^device [0-9]*: \(.*\) (sm_.*/\1/p' <<< "$info" | head -1)
slug=$($FP slug "${gpu_name:-unknown}")
out=${out:-profiles/$slug}
ncu_version=$(ncu --version | tail -1)
echo "== $gpu_name -> $out/ ($ncu_version)"

read -ra sections <<< "$($FP ncu-sections)"
section_args=()
for s in "${sections[@]}"; do section_args+=(--section "$s"); done
metrics=$($FP ncu-metrics)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[[ -n $reports ]] && mkdir -p "$reports"

# profile REPORT LOG EXE FLAGS...: one --profile launch under ncu. When ncu refuses a metric by name,
# drops every requested metric its messages name and tries again; when it refuses the list without
# naming one, captures with the sections alone (and keeps to them for the rest of the run).
# kernel_args (an array) holds the line's kernel filter; emptied when it matches no kernel.
profile() {
  local rep=$1 log=$2 m
  shift 2
  while :; do
    if ncu --clock-control none --profile-from-start off "${section_args[@]}" "${source_args[@]}" \
      ${metrics:+--metrics "$metrics"} "${kernel_args[@]}" -f -o "$rep" "$@" > "$log" 2>&1 && [[ -f $rep.ncu-rep ]]; then
      return 0
    fi
    if ((${#kernel_args[@]})) && grep -qi "no kernels were profiled" "$log"; then
      echo "  no kernel matched ${kernel_args[*]}: captured again with every kernel of the launch"
      kernel_args=()
      continue
    fi
    local kept=() dropped=() all=()
    IFS=, read -ra all <<< "$metrics"
    for m in "${all[@]}"; do
      if grep -E '==(ERROR|WARNING)==' "$log" | grep -qE "(^|[^a-z0-9_.])${m//./\\.}([^a-z0-9_.]|$)"; then
        dropped+=("$m")
      else
        kept+=("$m")
      fi
    done
    if ((${#dropped[@]})); then
      echo "  ncu does not know ${dropped[*]}: dropped (their columns stay empty)"
      metrics=$(IFS=,; echo "${kept[*]}")
      continue
    fi
    if [[ -n $metrics ]] && ncu --clock-control none --profile-from-start off "${section_args[@]}" "${source_args[@]}" \
      "${kernel_args[@]}" -f -o "$rep" "$@" > "$log.sections" 2>&1 && [[ -f $rep.ncu-rep ]]; then
      echo "  ncu refused the --metrics list without naming a metric (its log: $(grep -m1 '==ERROR==' "$log"));"
      echo "  captured with the sections' own metrics only, from now on"
      metrics=""
      return 0
    fi
    return 1
  done
}

failed=()
for step in "${steps[@]}"; do
  exe=build/bin/$step
  mapfile -t shapes < <($FP shapes "$step")
  if ((${#shapes[@]} == 0)); then
    echo "== $step: no shape in profiles/ncu_shapes.txt: skipped (add a line '$step <flags>')"
    continue
  fi
  has_bwd=0
  "$exe" --bwd --device-info > /dev/null 2>&1 && has_bwd=1
  if ((has_bwd)) && ! printf '%s\n' "${shapes[@]}" | grep -q -- '--bwd'; then
    echo "  note: $step has a backward but no --bwd line in profiles/ncu_shapes.txt"
  fi
  dir=$work/$step
  mkdir -p "$dir"
  i=0
  for flags in "${shapes[@]}"; do
    id=$(printf '%03d' $i)
    i=$((i + 1))
    if [[ " $flags " == *" --bwd "* ]] && ((!has_bwd)); then
      echo "== $step $flags: skipped ($step has no backward pass)"
      continue
    fi
    kernel_args=() source_args=()
    [[ $($FP source "$step" "$flags") == 1 ]] && source_args=(--section SourceCounters)
    kfilter=$($FP kernels "$step" "$flags")
    [[ -n $kfilter ]] && kernel_args=(--kernel-name-base demangled --kernel-name "regex:$kfilter")
    echo "== $step --profile $flags${kfilter:+   (kernels matching $kfilter)}"
    # shellcheck disable=SC2086  # the flags are words
    if ! profile "$dir/$id" "$dir/$id.log" "$exe" --profile $flags; then
      echo "  FAILED (ncu or the step exited non-zero); the end of its log:"
      tail -15 "$dir/$id.log" | sed 's/^/    /'
      failed+=("$step $flags")
      continue
    fi
    printf '%s\n' "$flags" > "$dir/$id.flags"
    ncu -i "$dir/$id.ncu-rep" --page raw --csv --print-units base > "$dir/$id.raw.csv" 2> /dev/null ||
      ncu -i "$dir/$id.ncu-rep" --page raw --csv > "$dir/$id.raw.csv"
    ncu -i "$dir/$id.ncu-rep" --page details --section SpeedOfLight > "$dir/$id.sol.txt" 2> /dev/null ||
      ncu -i "$dir/$id.ncu-rep" --page details > "$dir/$id.sol.txt" || true
    if ((${#source_args[@]})); then
      ncu -i "$dir/$id.ncu-rep" --page source --print-source sass --csv > "$dir/$id.source.csv" 2> "$dir/$id.source.log" ||
        { echo "  ncu could not export the source counters: $(tail -1 "$dir/$id.source.log")"; rm -f "$dir/$id.source.csv"; }
      [[ -f $dir/sass.txt ]] || cuobjdump -sass "$exe" > "$dir/sass.txt" 2> /dev/null ||
        { echo "  cuobjdump -sass $exe failed: no source_stalls.csv"; rm -f "$dir/sass.txt"; }
    fi
    [[ -n $reports ]] && cp "$dir/$id.ncu-rep" "$reports/$step.$id.ncu-rep"
  done
  if compgen -G "$dir/*.flags" > /dev/null; then
    rm -f "$out/$step/metrics.csv" "$out/$step/speed_of_light.txt" "$out/$step/ncu_raw.csv" "$out/$step/source_stalls.csv"
    $FP panel "$dir" "$out/$step" --ncu-version "$ncu_version" || failed+=("$step (no kernel rows)")
    $FP source-stalls "$dir" "$out/$step" || failed+=("$step (source counters)")
  fi
done

if ((${#failed[@]})); then
  echo "== capture.sh: ${#failed[@]} capture(s) failed:"
  printf '   %s\n' "${failed[@]}"
  exit 1
fi
echo "== capture.sh: done; compare with: python3 profiles/compare.py <A> <B>"
