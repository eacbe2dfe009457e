# Step 23's own tests (included by tests/CMakeLists.txt with `step` and `exe` set). A K/V row's offset in the pool
# is found in 64 bits (PageCopy::offset, once per row and tile), so a page of page_size·kv_heads·head_dim >= 2^32
# elements (here 2^20 keys of 32 K/V heads of d 128) is not refused: it reaches the device (none here:
# CUDA_VISIBLE_DEVICES=-1 hides one where there is, so the test needs no GPU and allocates nothing).
set(_kv --batch 1 --heads 32 --kv-heads 32 --seq-q 1 --seq-k 16 --head-dim 128 --cache-lens 16)
add_cli_test(${step}.page_of_2to32_elements 3 "no CUDA device"
             env CUDA_VISIBLE_DEVICES=-1 ${exe} ${_kv} --page-size 1048576)
