# Step 04's own test (included by tests/CMakeLists.txt with `step` and `exe` set): it refuses,
# naming the bytes of S and P, a problem whose S and P cannot fit (needs the GPU for its free
# memory): 2 · 4·32·16384² fp32 = 256 GiB.
add_gpu_cli_test(${step}.refuses_oversized 2 "needs .* GiB of device memory .* workspace: S and P"
                 ${exe} --batch 4 --heads 32 --seq 16384 --check)
