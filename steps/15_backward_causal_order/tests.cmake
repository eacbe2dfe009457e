# Step 15's own tests (included by tests/CMakeLists.txt with `step` and `exe` set): a pinned
# candidate that does not exist gets a clear message naming the candidates (needs the GPU: the
# tuner runs at the first launch of the backward).
add_gpu_cli_test(${step}.bad_pinned_config 2 "FA_STEP15_CONFIG=nope is not a candidate"
                 env FA_STEP15_CONFIG=nope ${exe} --batch 1 --heads 1 --seq 64 --check)
# Key blocks of 128 are the dK/dV grid's y: a longer seq_k is refused before anything runs (no GPU needed).
add_cli_test(${step}.seq_k_blocks 2 "seq_k must be at most 65535.128 = 8388480"
             env CUDA_VISIBLE_DEVICES=-1 ${exe} --batch 1 --heads 1 --seq-q 1 --seq-k 8388609 --head-dim 8 --bwd)
# The head-group switch is 0 or 1 (host/env.h): anything else is refused, read where the launch plans
# its grid (head_group), so on a GPU.
add_gpu_cli_test(${step}.bad_group_switch 2 "FA_STEP15_GROUP=2: expected 0 or 1"
                 env FA_STEP15_GROUP=2 ${exe} --batch 1 --heads 1 --seq 64 --causal --check)
