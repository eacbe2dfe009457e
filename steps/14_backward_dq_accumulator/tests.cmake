# Step 14's own test (included by tests/CMakeLists.txt with `step` and `exe` set): a pinned
# candidate that does not exist gets a clear message naming the candidates (needs the GPU: the
# tuner runs at the first launch of the backward).
add_gpu_cli_test(${step}.bad_pinned_config 2 "FA_STEP14_CONFIG=nope is not a candidate"
                 env FA_STEP14_CONFIG=nope ${exe} --batch 1 --heads 1 --seq 64 --check)
