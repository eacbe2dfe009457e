# Step 22's own tests (included by tests/CMakeLists.txt with `step` and `exe` set): a pinned split
# count that is not a whole number from 1 to 64 is refused with the variable, its value and the range
# (host/env.h). supports() reads the pin, so the refusal comes before the device is opened: no GPU
# needed (CUDA_VISIBLE_DEVICES=-1 hides one where there is), and a valid pin reaches "no CUDA device".
add_cli_test(${step}.pinned_splits_garbage 2 "FA_STEP22_SPLITS=8abc: expected a whole number from 1 to 64"
             env CUDA_VISIBLE_DEVICES=-1 FA_STEP22_SPLITS=8abc
             ${exe} --batch 1 --heads 8 --kv-heads 1 --seq-q 1 --seq-k 4096 --cache-lens 4096)
# The rule's ceiling (64) is the merge's limit, and a pin's.
foreach(n 0 65)
  add_cli_test(${step}.pinned_splits_out_of_range_${n} 2 "FA_STEP22_SPLITS=${n}: expected a whole number from 1 to 64"
               env CUDA_VISIBLE_DEVICES=-1 FA_STEP22_SPLITS=${n}
               ${exe} --batch 1 --heads 8 --kv-heads 1 --seq-q 1 --seq-k 4096 --cache-lens 4096)
endforeach()
foreach(n 8 64)
  add_cli_test(${step}.pinned_splits_valid_${n} 3 "no CUDA device"
               env CUDA_VISIBLE_DEVICES=-1 FA_STEP22_SPLITS=${n}
               ${exe} --batch 1 --heads 8 --kv-heads 1 --seq-q 1 --seq-k 4096 --cache-lens 4096)
endforeach()
# A pinned block of rows (FA_STEP22_ROWS, the row rule's measurements) is 16 or 32, refused the same way.
add_cli_test(${step}.pinned_rows_neither 2 "FA_STEP22_ROWS=24: a block holds 16 or 32 rows"
             env CUDA_VISIBLE_DEVICES=-1 FA_STEP22_ROWS=24
             ${exe} --batch 1 --heads 32 --kv-heads 1 --seq-q 1 --seq-k 4096 --cache-lens 4096)
add_cli_test(${step}.pinned_rows_garbage 2 "FA_STEP22_ROWS=x: expected a whole number from 16 to 32"
             env CUDA_VISIBLE_DEVICES=-1 FA_STEP22_ROWS=x
             ${exe} --batch 1 --heads 32 --kv-heads 1 --seq-q 1 --seq-k 4096 --cache-lens 4096)
add_cli_test(${step}.pinned_rows_valid 3 "no CUDA device"
             env CUDA_VISIBLE_DEVICES=-1 FA_STEP22_ROWS=16 FA_STEP22_SPLITS=1
             ${exe} --batch 1 --heads 32 --kv-heads 1 --seq-q 1 --seq-k 4096 --cache-lens 4096)
# --help tells this step's real defaults: its K/V heads, the element type of its own sweep, causal
# aligned to each sequence's end; and --heads alone (MHA) says so.
add_cli_test(${step}.help_kv_heads 0 "--kv-heads N +K/V heads .*default 8, of the default 32 heads" ${exe} --help)
add_cli_test(${step}.help_sweep_dtype 0 "--dtype S .*[(]default f16. --sweep: f16[)]" ${exe} --help)
add_cli_test(${step}.help_causal 0 "--causal .*each sequence's last query sees its last key" ${exe} --help)
add_cli_test(${step}.heads_alone_says_mha 3 "note: --heads 16 without --kv-heads runs MHA"
             env CUDA_VISIBLE_DEVICES=-1 ${exe} --heads 16 --seq-q 1 --seq-k 64)
