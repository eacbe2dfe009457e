# Command-line behaviour of the executables that needs no GPU: a flag given twice, conflicting
# flags, --sweep beside a shape flag, numbers too large to represent, --input files that are
# missing or do not match the shape flags, run_all --steps naming no step, and each step's --help
# listing only what it accepts. Every one is an argument error found before any device work:
# exit code 2 and a message naming the flag. Included from tests/CMakeLists.txt after
# add_cli_test() (tests/expect.sh: <exit code> <extended regex> <command...>).

set(_huge 99999999999999999999999)  # beyond a 64-bit integer: strtoll's ERANGE
foreach(step IN LISTS FA_STEPS)
  set(exe $<TARGET_FILE:${step}>)
  get_target_property(fam ${step} FA_FAMILY)
  add_cli_test(${step}.repeated_flag 2 "--seed given twice" ${exe} --seed 1 --seed 2)
  add_cli_test(${step}.repeated_switch 2 "--check given twice" ${exe} --check --check)
  add_cli_test(${step}.profile_and_sweep 2 "--profile conflicts with --sweep [(]--profile runs alone[)]"
               ${exe} --sweep --profile)
  add_cli_test(${step}.help_lists_input 0 "--input S +read" ${exe} --help)
  add_cli_test(${step}.help_with_value 2 "--help takes no value" ${exe} --help=1)
  if(fam STREQUAL "softmax")
    add_cli_test(${step}.rows_overflow 2 "--rows: ${_huge} is out of range" ${exe} --rows ${_huge})
    add_cli_test(${step}.sweep_with_rows 2 "--sweep conflicts with --rows [(]--sweep runs the softmax benchmark shapes"
                 ${exe} --sweep --rows 4)
    add_cli_test(${step}.sweep_with_input 2 "--sweep conflicts with --input" ${exe} --input x.npy --sweep)
    add_cli_test(${step}.input_shape_mismatch 2 "--cols 30 does not match '.*sm_cols_31.x.npy' of shape \\[6, 31\\]"
                 ${exe} --input ${FA_DATA_DIR}/sm_cols_31.x.npy --cols 30)
  elseif(fam STREQUAL "matmul")
    add_cli_test(${step}.m_overflow 2 "--m: ${_huge} is out of range" ${exe} --m ${_huge})
    add_cli_test(${step}.size_with_m 2 "--size conflicts with --m" ${exe} --m 3 --size 64)
    add_cli_test(${step}.sweep_with_size 2 "--sweep conflicts with --size [(]--sweep runs the matmul benchmark shapes"
                 ${exe} --sweep --size 64)
    add_cli_test(${step}.input_missing 2 "cannot open '/nonexistent/mm.a.npy'" ${exe} --input /nonexistent/mm)
    add_cli_test(${step}.input_shape_mismatch 2 "--m 16 does not match the --input files: .*M = 17, N = 23, K = 31"
                 ${exe} --input ${FA_DATA_DIR}/mm_nn_17x23x31 --m 16)
    add_cli_test(${step}.input_wrong_layout 2 "A has K = 31, B has K = 23 [(]--layout nn"
                 ${exe} --input ${FA_DATA_DIR}/mm_nt_17x23x31)
  elseif(fam STREQUAL "attention")
    add_cli_test(${step}.seq_overflow 2 "--seq: ${_huge} is out of range" ${exe} --seq ${_huge})
    add_cli_test(${step}.seq_and_seq_q 2 "--seq conflicts with --seq-q" ${exe} --seq 64 --seq-q 32)
    add_cli_test(${step}.seq_k_and_seq 2 "--seq conflicts with --seq-k" ${exe} --seq-k 32 --seq 64)
    add_cli_test(${step}.sweep_with_seq 2 "--sweep conflicts with --seq [(]--sweep runs the attention benchmark shapes"
                 ${exe} --sweep --seq 64)
    add_cli_test(${step}.scale_overflow 2 "--scale: 1e999 is out of range" ${exe} --scale 1e999)
    add_cli_test(${step}.input_missing 2 "cannot open '/nonexistent/at.q.npy'" ${exe} --input /nonexistent/at)
    add_cli_test(${step}.input_shape_mismatch 2
                 "--seq 64 does not match the --input files: .*at_q100_k100_d128_b1h2.q.npy' is \\[1, 2, 100, 128\\]"
                 ${exe} --input ${FA_DATA_DIR}/at_q100_k100_d128_b1h2 --seq 64)
    # --inputs uniform|randn (how the random inputs are drawn): strict values, not beside --input files
    add_cli_test(${step}.help_lists_inputs 0 "--inputs S +how the random Q, K, V" ${exe} --help)
    add_cli_test(${step}.inputs_bad_value 2 "--inputs: 'normal' is not one of: uniform, randn" ${exe} --inputs normal)
    add_cli_test(${step}.inputs_with_input 2 "--input conflicts with --inputs [(]--input reads the inputs from files[)]"
                 ${exe} --inputs randn --input ${FA_DATA_DIR}/at_q100_k100_d128_b1h2)
  endif()
endforeach()

# --help lists only what a step accepts: the fp16/bf16 steps offer no f32, the forward-only steps
# no --bwd (and refuse it, saying why).
foreach(step 09_tensor_core_forward 10_swizzle_pipeline_forward 11_tuned_forward 12_tensor_core_backward
             16_deterministic_backward)
  if(NOT TARGET ${step})
    continue()
  endif()
  set(exe $<TARGET_FILE:${step}>)
  add_cli_test(${step}.help_dtypes 0 "--dtype S .*[(]f16[|]bf16[)]$" ${exe} --help)
  add_cli_test(${step}.help_no_f32 0 "^f32 not in --help$"
               sh -c "${exe} --help | grep -q f32 && echo 'f32 in --help' || echo 'f32 not in --help'")
  add_cli_test(${step}.f32_refused 2 "--dtype: 'f32' is not one of: f16, bf16" ${exe} --dtype f32)
endforeach()
foreach(step 12_tensor_core_backward 16_deterministic_backward)
  if(TARGET ${step})
    add_cli_test(${step}.help_bwd 0 "--bwd +also check and time the backward" $<TARGET_FILE:${step}> --help)
  endif()
endforeach()
# The mma.sync backward steps run fwd + bwd by default: --fwd-only runs the forward alone (and --input
# then reads no dO), --bwd beside it is a conflict.
foreach(step 12_tensor_core_backward 13_backward_warp_tiles 14_backward_dq_accumulator 15_backward_causal_order
             16_deterministic_backward)
  if(TARGET ${step})
    set(exe $<TARGET_FILE:${step}>)
    add_cli_test(${step}.help_fwd_only 0 "--fwd-only +the forward alone" ${exe} --help)
    add_cli_test(${step}.help_input_dout 0 "--input S +read Q, K, V [(]and dO unless --fwd-only[)]" ${exe} --help)
    add_cli_test(${step}.fwd_only_and_bwd 2 "--bwd conflicts with --fwd-only" ${exe} --fwd-only --bwd)
    add_cli_test(${step}.fwd_only_runs 3 "no CUDA device" env CUDA_VISIBLE_DEVICES=-1 ${exe} --fwd-only --seq 64)
  endif()
endforeach()
foreach(step 05_flash_forward 06_causal_stages 09_tensor_core_forward 10_swizzle_pipeline_forward 11_tuned_forward)
  set(exe $<TARGET_FILE:${step}>)
  add_cli_test(${step}.help_no_bwd 0 "^--bwd not in --help$"
               sh -c "${exe} --help | grep -q -e --bwd && echo '--bwd in --help' || echo '--bwd not in --help'")
  add_cli_test(${step}.bwd_refused 2 "--bwd: ${step} has no backward pass" ${exe} --bwd)
  # a step without a KV cache refuses --cache-lens itself, before the lengths (2 for batch 3) are looked at
  add_cli_test(${step}.cache_lens_refused 2 "--cache-lens: ${step} has no KV cache [(]--cache-lens is for the decoding steps: split-KV and paged[)]"
               ${exe} --batch 3 --cache-lens 1,2)
  add_cli_test(${step}.page_size_refused 2 "--page-size: ${step} reads no paged KV cache" ${exe} --page-size 16)
endforeach()
foreach(step 04_naive_attention 07_flash_backward 08_backward_delta_reuse)
  set(exe $<TARGET_FILE:${step}>)
  add_cli_test(${step}.help_bwd 0 "--bwd +also check and time the backward" ${exe} --help)
  add_cli_test(${step}.help_dtype_f32_only 0 "--dtype S .*[(]f32[)]$" ${exe} --help)
endforeach()

# run_all lists every built step when --steps names one that is not: the expected list is FA_STEPS
# itself, so a new step's add_step line needs no edit here.
set(exe $<TARGET_FILE:run_all>)
list(JOIN FA_STEPS ", " _built)
add_cli_test(run_all.unknown_step 2 "--steps: no built step '99' [(]built: ${_built}[)]"
             ${exe} --steps 01,99)
add_cli_test(run_all.empty_step 2 "--steps '01,,02': an empty item" ${exe} --steps 01,,02)
add_cli_test(run_all.repeated_step 2 "--steps '01,1': 01_safe_softmax is named twice" ${exe} --steps 01,1)
# profiles/smoke.sh (a step's first run on a GPU, each --check under a timeout): its refusals, and with no
# device it stops at the first run with the step's own message, not after a line per shape.
set(_smoke ${PROJECT_SOURCE_DIR}/profiles/smoke.sh)
add_cli_test(smoke.unknown_step 2 "smoke.sh: no step '99' in" bash ${_smoke} --bin $<TARGET_FILE_DIR:run_all> 99)
add_cli_test(smoke.bad_timeout 2 "--timeout needs whole seconds" bash ${_smoke} --timeout 0 01)
add_cli_test(smoke.no_device 1 "^smoke.sh: error: no CUDA device"
             env CUDA_VISIBLE_DEVICES=-1 bash ${_smoke} --bin $<TARGET_FILE_DIR:run_all> 01)
add_cli_test(run_all.repeated_flag 2 "--steps given twice" ${exe} --steps 01 --steps 02)
add_cli_test(run_all.csv_and_json 2 "--csv conflicts with --json" ${exe} --json --csv)
add_cli_test(run_all.reps_overflow 2 "--reps: ${_huge} is out of range" ${exe} --reps ${_huge})

# profiles/suite_detached.sh (the whole suite in one ctest run that outlives a device call): its refusals,
# none of which starts anything.
set(_suite ${PROJECT_SOURCE_DIR}/profiles/suite_detached.sh)
add_cli_test(suite_detached.no_command 2 "say start or wait" bash ${_suite})
add_cli_test(suite_detached.bad_wait 2 "wait takes whole seconds" bash ${_suite} wait soon)
add_cli_test(suite_detached.bad_jobs 2 "start takes only -j N" bash ${_suite} start -j many)
add_cli_test(suite_detached.nothing_started 1 "no suite started"
             env FA_SUITE_DIR=${CMAKE_CURRENT_BINARY_DIR}/no_suite_here bash ${_suite} wait 0)
