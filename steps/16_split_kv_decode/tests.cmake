# Step 16's own test (included by tests/CMakeLists.txt with `step` and `exe` set): a pinned split
# count out of range gets a clear message (needs the GPU: the count is asked for at the launch).
add_gpu_cli_test(${step}.bad_pinned_splits 2 "FA_STEP16_SPLITS=0: a split count from 1 to 64"
                 env FA_STEP16_SPLITS=0 ${exe} --batch 1 --heads 8 --kv-heads 1 --seq-q 1 --seq-k 4096 --cache-lens 4096)
