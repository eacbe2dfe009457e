# Step 23's own tests (included by tests/CMakeLists.txt with `step` and `exe` set). A K/V row's address is
# computed from 32-bit products inside its page (PageCopy), so supports() refuses a page of
# page_size·kv_heads·head_dim >= 2^32 elements (here 2^20 keys of 32 K/V heads of d 128) before the device is
# opened (no GPU needed: CUDA_VISIBLE_DEVICES=-1 hides one where there is); a key less reaches "no CUDA device".
set(_kv --batch 1 --heads 32 --kv-heads 32 --seq-q 1 --seq-k 16 --head-dim 128 --cache-lens 16)
add_cli_test(${step}.page_too_large 2 "a page of .* must stay under 2\\^32 [(]got page size 1048576[)]"
             env CUDA_VISIBLE_DEVICES=-1 ${exe} ${_kv} --page-size 1048576)
add_cli_test(${step}.page_fits 3 "no CUDA device"
             env CUDA_VISIBLE_DEVICES=-1 ${exe} ${_kv} --page-size 1048575)
