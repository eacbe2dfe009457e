#!/usr/bin/env bash
# sanitize.sh TOOL FAMILY EXE: EXE --check on each small shape of its kind under
# compute-sanitizer --tool TOOL; any finding fails. The kind comes from the family and from what
# the step accepts (asked of EXE without a device: element types, a backward):
#   softmax    odd rows (scalar path), float4 rows, split long rows (float4 and scalar)
#   matmul     scalar and float4 loads, both tile shapes, batched, more tiles than SMs
#   attention  both head-dim instances and a padded one, causal with seq_q > seq_k and < seq_k
#              (unmasked, diagonal and skipped tiles), ragged tails; with --bwd where the step has
#              a backward (key blocks past the last query: dK = dV = 0); shapes alternate over
#              the element types the step runs (fp32, or f16 then bf16); each shape once per
#              variant where the step has named variants (--variant, e.g. step 12's two dQ paths);
#              KV caches with ragged lengths where the step takes --cache-lens (step 22), paged where it
#              takes --page-size (step 23)
# A shape the step refuses ("does not support") is noted and skipped; at least one must run.
# FA_SANITIZE_SHARDS=n FA_SANITIZE_SHARD=i: only every n-th accepted shape, from the i-th.
# Exits 77 (ctest: skipped) with a message where there is no sanitizer, no CUDA device, or a GPU
# the step is not built for.
set -u
tool=$1 family=$2 exe=$3
# The tool first, before the device: without it the skip names it, whether or not there is a GPU.
# Looked for on the PATH, then in FA_CUDA_BIN (the bin/ of the toolkit the build used, set by
# tests/CMakeLists.txt; /usr/local/cuda/bin by default).
cuda_bin=${FA_CUDA_BIN:-/usr/local/cuda/bin}
san=$(command -v compute-sanitizer || true)
[[ -z $san && -x $cuda_bin/compute-sanitizer ]] && san=$cuda_bin/compute-sanitizer
if [[ -z $san ]]; then
  echo "SKIPPED: compute-sanitizer not found (not on the PATH, not in $cuda_bin; it ships with the CUDA toolkit)"
  exit 77
fi
out=$("$exe" --device-info 2>&1)
case $? in
  3) echo "SKIPPED: $(grep -m1 -o 'no CUDA device.*' <<< "$out" || echo 'no CUDA device')"; exit 77 ;;
  4) echo "SKIPPED: $(grep -m1 'needs a compute capability' <<< "$out")"; exit 77 ;;
esac

# Accepted without a device (validation runs first, then "no CUDA device", exit 3)?
accepts() { CUDA_VISIBLE_DEVICES=-1 "$exe" "$@" >/dev/null 2>&1; [[ $? == 3 ]]; }

case $family in
  softmax)
    shapes=("--rows 37 --cols 3001" "--rows 64 --cols 4096" "--rows 3 --cols 40000" "--rows 2 --cols 40001") ;;
  matmul)
    # 128×64 tiles with odd K and N (scalar loads and stores); float4 everywhere, batched; scalar
    # A with float4 B and C on 128×128 tiles (2·2·40 tiles); float4 on 128×128 tiles
    shapes=("--m 100 --n 70 --k 33 --layout nt" "--m 256 --n 64 --k 128 --layout nn --batch 3"
            "--m 129 --n 132 --k 20 --layout tn --batch 40" "--m 256 --n 256 --k 64 --layout nt --batch 40") ;;
  attention)
    small=(--batch 1 --heads 1 --seq 64)
    dtypes=()
    for t in f32 f16 bf16; do accepts "${small[@]}" --dtype $t && dtypes+=("$t"); done
    if [[ ${#dtypes[@]} == 0 ]]; then
      echo "FAIL: $(basename "$exe") accepts none of --dtype f32, f16, bf16 on ${small[*]}"
      exit 1
    fi
    if accepts "${small[@]}" --bwd --dtype "${dtypes[0]}"; then
      shapes=("--batch 1 --heads 2 --seq-q 70 --seq-k 45 --head-dim 64 --causal --bwd"
              "--batch 1 --heads 2 --seq-q 130 --seq-k 200 --head-dim 64 --causal --bwd"
              "--batch 1 --heads 2 --seq-q 200 --seq-k 150 --head-dim 128 --causal --bwd"
              "--batch 1 --heads 2 --seq-q 100 --seq-k 230 --head-dim 128 --causal --bwd"
              "--batch 2 --heads 1 --seq-q 100 --seq-k 130 --head-dim 40 --bwd"
              "--batch 2 --heads 1 --seq-q 33 --seq-k 100 --head-dim 128 --bwd"
              "--batch 1 --heads 2 --seq-q 2050 --seq-k 200 --head-dim 64 --bwd")  # step 16: a split last wave
    else
      shapes=("--batch 1 --heads 2 --seq-q 70 --seq-k 45 --head-dim 64 --causal"
              "--batch 1 --heads 2 --seq-q 200 --seq-k 300 --head-dim 64 --causal"
              "--batch 1 --heads 2 --seq-q 200 --seq-k 150 --head-dim 128 --causal"
              "--batch 2 --heads 1 --seq-q 100 --seq-k 130 --head-dim 96"
              "--batch 1 --heads 2 --seq-q 100 --seq-k 130 --head-dim 128")
    fi
    # A step that decodes over a KV cache (--cache-lens; step 22): grouped heads, lengths that are
    # full, empty and short, splits merged (2 and 4 of them) and one split, two row blocks (MQA).
    if accepts "${small[@]}" --cache-lens 64 --dtype "${dtypes[0]}"; then
      shapes+=("--batch 3 --heads 8 --kv-heads 2 --seq-q 1 --seq-k 1100 --head-dim 128 --cache-lens 1100,0,37"
               "--batch 2 --heads 16 --kv-heads 1 --seq-q 3 --seq-k 700 --head-dim 64 --causal --cache-lens 700,5"
               "--batch 1 --heads 4 --seq-q 2 --seq-k 2100 --head-dim 96 --cache-lens 2000")
    fi
    # A step that reads a paged cache (--page-size; step 23): pages of 1 key, and of 7 (tiles cross pages).
    if accepts "${small[@]}" --cache-lens 64 --page-size 16 --dtype "${dtypes[0]}"; then
      shapes+=("--batch 3 --heads 8 --kv-heads 2 --seq-q 1 --seq-k 1100 --head-dim 128 --cache-lens 1100,0,37 --page-size 1"
               "--batch 2 --heads 16 --kv-heads 1 --seq-q 3 --seq-k 700 --head-dim 64 --causal --cache-lens 700,5 --page-size 7")
    fi
    for i in "${!shapes[@]}"; do shapes[i]+=" --dtype ${dtypes[i % ${#dtypes[@]}]}"; done
    # A step with named variants (--help: "--variant S ... (a|b)") runs every shape in each.
    variants=$("$exe" --help 2>/dev/null | sed -n 's/^ *--variant .*(\([a-z0-9_|-]*\)) *$/\1/p' | tr '|' ' ')
    if [[ -n $variants ]]; then
      all=()
      for v in $variants; do for shape in "${shapes[@]}"; do all+=("$shape --variant $v"); done; done
      shapes=("${all[@]}")
    fi ;;
  *) echo "sanitize.sh: unknown family '$family'"; exit 1 ;;
esac

# The shapes the step accepts (known without a device: under the sanitizer a refusal's exit 2 would
# read as the sanitizer's own failure, 255); at least one must be accepted.
run=()
for shape in "${shapes[@]}"; do
  # shellcheck disable=SC2086  # the shape is a list of flags
  if accepts --check $shape; then run+=("$shape"); else echo "   (not supported by this step, skipped: $shape)"; fi
done
if [[ ${#run[@]} == 0 ]]; then
  echo "FAIL: the step supports none of the $family shapes"
  exit 1
fi
# Sharded (tests/CMakeLists.txt: FA_SANITIZE_SHARDS_<step>): shard i of n checks every n-th accepted
# shape, so a step's long racecheck runs as n tests side by side under ctest -j.
shards=${FA_SANITIZE_SHARDS:-1} shard=${FA_SANITIZE_SHARD:-0}
if ! [[ $shards =~ ^[1-9][0-9]*$ && $shard =~ ^[0-9]+$ ]] || ((shard >= shards)); then
  echo "sanitize.sh: FA_SANITIZE_SHARD=$shard of FA_SANITIZE_SHARDS=$shards is not a shard"
  exit 1
fi
mine=()
for i in "${!run[@]}"; do ((i % shards == shard)) && mine+=("${run[i]}"); done
if [[ ${#mine[@]} == 0 ]]; then
  echo "FAIL: shard $shard of $shards has no shape (${#run[@]} accepted): fewer shards for this step"
  exit 1
fi

ran=0
for shape in "${mine[@]}"; do
  echo "== $tool: $(basename "$exe") --check $shape"
  # shellcheck disable=SC2086  # the shape is a list of flags
  out=$("$san" --tool "$tool" --error-exitcode 99 "$exe" --check $shape 2>&1)
  rc=$?
  printf '%s\n' "$out" | tail -n 30
  if [[ $rc == 2 ]] && grep -q "does not support" <<< "$out"; then  # refused only on this device
    echo "   (shape not supported by this step on this device: skipped)"
    continue
  fi
  if [[ $rc != 0 ]]; then
    echo "FAIL: exit code $rc on --check $shape"
    exit 1
  fi
  ran=$((ran + 1))
done
if [[ $ran == 0 ]]; then
  echo "FAIL: none of this test's ${#mine[@]} shapes ran on this device"
  exit 1
fi
suffix="" && ((shards > 1)) && suffix=" (shard $shard of $shards; ${#run[@]} accepted in all)"
echo "ok: $ran of ${#shapes[@]} shapes clean under $tool$suffix"
