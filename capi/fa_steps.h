/* fa_steps.h: the C ABI of libfa_steps.so, the steps' attention kernels for other languages (the
 * Python package python/flashsteps loads it with ctypes).
 *
 * Every step of the build is listed in the series' order (the index of fa_step_*), described by its
 * StepInfo (host/ops.h): the element types and head_dim rule it runs, GQA, a KV cache, its variants,
 * the GPU it needs. The launch calls take raw device pointers laid out as the series' kernels take
 * them (docs/conventions.md, "Layout"): Q, O, dO, dQ [batch, heads, seq_q, head_dim] and K, V, dK,
 * dV [batch, kv_heads, seq_k, head_dim], row-major and contiguous, 16-byte aligned, in the element
 * type `dtype`; LSE [batch, heads, seq_q] fp32, natural log. They are asynchronous on `stream` (a
 * cudaStream_t; null: the legacy default stream) and run on the current device.
 *
 * A paged KV cache (step 23) has calls of its own, fa_check_paged, fa_workspace_size_paged and
 * fa_decode_paged, which take the pages' shape beside the problem: K and V are pools of pages,
 * [num_pages, page_size, kv_heads, head_dim], and sequence b's key j is row j % page_size of page
 * block_table[b * max_pages + j / page_size]. A step that reads a paged cache runs through them only
 * (has_paged_decode), and the other calls refuse it; fa_decode_paged refuses a step that reads none.
 *
 * Errors: every call returns FA_OK or an error code (the series' exit codes, host/check.h), and
 * fa_last_error() holds the message of this thread's last failed call. Arguments are checked before
 * the device is asked (the step's own rule: fa::check_attention_launch), so a refusal needs no GPU.
 */
#ifndef FA_STEPS_H
#define FA_STEPS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define FA_API __declspec(dllexport)
#else
#define FA_API __attribute__((visibility("default")))
#endif

/* 2: fa_step_info gained has_paged_decode (at its end: a caller built against 1 passes a smaller
 * struct, which the library would write past), and the paged calls were added. */
#define FA_ABI_VERSION 2

enum fa_status {
  FA_OK = 0,
  FA_ERR_CUDA = 1,         /* a CUDA call failed (the message names it) */
  FA_ERR_USAGE = 2,        /* the step refuses the arguments: dtype, head_dim, shape, pointer, direction */
  FA_ERR_NO_DEVICE = 3,    /* no usable CUDA device (or no driver) */
  FA_ERR_WRONG_DEVICE = 4, /* the step's kernels need another GPU (StepInfo::needs_cc) */
  FA_ERR_INTERNAL = 5      /* anything else (out of host memory, a bug) */
};
enum fa_dtype { FA_F32 = 0, FA_F16 = 1, FA_BF16 = 2 };              /* fa::DType's order */
enum fa_family { FA_SOFTMAX = 0, FA_MATMUL = 1, FA_ATTENTION = 2 }; /* fa::Family's order */
enum fa_direction { FA_FORWARD = 0, FA_BACKWARD = 1, FA_DECODE = 2 };

typedef struct {
  const char* name;                          /* "19_hopper_pingpong_overlap" */
  const char* idea;                          /* one line: what the step adds */
  const char* prev;                          /* the step it is checked against, or "" */
  const char* workspace_note;                /* what its workspace holds, or "" */
  int family;                                /* enum fa_family */
  int has_forward, has_backward, has_decode; /* attention launchers; decode: a contiguous KV cache (fa_decode) */
  int needs_cc;                              /* major*10 + minor of the one GPU its kernels run on; 0: any */
  int n_dtypes;
  int dtypes[3]; /* enum fa_dtype, the first is its default */
  int max_head_dim, head_dim_multiple;
  int positive_scale; /* the softmax scale must be > 0 */
  int gqa;            /* runs fewer K/V heads than query heads */
  long long max_batch_heads;
  int n_variants;       /* names: fa_step_variant */
  int has_paged_decode; /* reads a paged KV cache (fa_decode_paged), and only that: no other launch call */
} fa_step_info;

typedef struct {
  int batch, heads, kv_heads, seq_q, seq_k, head_dim; /* kv_heads 0: as many as heads */
  int dtype;                                          /* enum fa_dtype */
  int causal;                                         /* top-left aligned; decode: each sequence's end */
  float scale;                                        /* S = scale * Q K^T */
  int variant;                                        /* index into the step's variants, 0: its default */
} fa_attn_params;

FA_API int fa_abi_version(void);
/* The message of this thread's last failed call ("" if none): valid until its next call. */
FA_API const char* fa_last_error(void);

FA_API int fa_step_count(void);
/* The index of a step by its full name or its number ("19"). */
FA_API int fa_step_find(const char* name, int* index);
FA_API int fa_step_info_get(int index, fa_step_info* out);
/* The name of a variant of a step, or null past its last. */
FA_API const char* fa_step_variant(int index, int variant);

/* The current device's compute capability (major*10 + minor; FA_FAKE_CC applies) and name. */
FA_API int fa_device(int* cc, char* name, size_t name_size);
/* FA_OK when the current device runs the step's kernels, else the reason (no device, another GPU). */
FA_API int fa_step_runs_here(int index);

/* The step's rule for a problem, without a device: FA_OK or FA_ERR_USAGE with the step's reason. */
FA_API int fa_check(int index, const fa_attn_params* p, int direction);
/* The device scratch the call of `direction` needs, in bytes (0: none; the pointer may be null). */
FA_API int fa_workspace_size(int index, const fa_attn_params* p, int direction, size_t* bytes);

FA_API int fa_forward(int index, const fa_attn_params* p, const void* q, const void* k, const void* v, void* o,
                      float* lse, void* workspace, size_t workspace_bytes, void* stream);
/* Forward over a KV cache: k_cache, v_cache [batch, kv_heads, seq_k (the capacity), head_dim], and
 * cache_seqlens [batch] int32 on the device, each in [0, seq_k]: keys past a sequence's length are
 * never read. */
FA_API int fa_decode(int index, const fa_attn_params* p, const void* q, const void* k_cache, const void* v_cache,
                     const int* cache_seqlens, void* o, float* lse, void* workspace, size_t workspace_bytes,
                     void* stream);
/* The paged form: the problem `p` as for fa_decode, with seq_k the capacity of each sequence, which
 * must be at most max_pages * page_size (the keys a row of the block table reaches), and the pages'
 * shape: page_size keys per page (at least 1), num_pages pages in the pool, max_pages entries per
 * sequence in the table. The step's rule (fa::check_attention_launch) refuses what it cannot run.
 * fa_check_paged and fa_workspace_size_paged ask without a device, as fa_check and fa_workspace_size. */
FA_API int fa_check_paged(int index, const fa_attn_params* p, int page_size, int num_pages, int max_pages);
FA_API int fa_workspace_size_paged(int index, const fa_attn_params* p, int page_size, int num_pages, int max_pages,
                                   size_t* bytes);
/* Forward over a paged KV cache: k_pages, v_pages [num_pages, page_size, kv_heads, head_dim] (16-byte
 * aligned, as every tensor); block_table [batch, max_pages] and cache_seqlens [batch] int32 on the
 * device, each length in [0, seq_k], and the first ceil(len / page_size) entries of sequence b's row
 * in [0, num_pages): entries past them are never read (-1 is fine there). Neither is read on the host,
 * so neither is checked here: a length or a page index outside those ranges reads outside the pool.
 * Rows of a page past a sequence's length are never read either. */
FA_API int fa_decode_paged(int index, const fa_attn_params* p, int page_size, int num_pages, int max_pages,
                           const void* q, const void* k_pages, const void* v_pages, const int* block_table,
                           const int* cache_seqlens, void* o, float* lse, void* workspace, size_t workspace_bytes,
                           void* stream);
/* dQ, dK, dV from dO, given the forward's O and LSE (any step's forward: they share the LSE). */
FA_API int fa_backward(int index, const fa_attn_params* p, const void* q, const void* k, const void* v, const void* o,
                       const void* dout, const float* lse, void* dq, void* dk, void* dv, void* workspace,
                       size_t workspace_bytes, void* stream);

#ifdef __cplusplus
}
#endif
#endif /* FA_STEPS_H */
