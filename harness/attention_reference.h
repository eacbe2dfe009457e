// attention_reference.h: the CPU references an attention check compares with, on the inputs of
// attention_inputs.h, over chosen heads or rows (the family's --check picks them within its CPU
// budget; the GPU tests take them all). Every function spreads its work over the host's cores.
//
//   reference_heads     fp64 (reference/: attention_forward, attention_backward) of whole heads:
//                       the fp32 steps' reference
//   reference_rows      fp64 and ref_lowp of query rows of the forward: the fp16/bf16 rule
//   reference_bwd_rows  fp64 and ref_lowp of rows of dQ (query rows) and of dK, dV (key rows):
//                       the fp16/bf16 rule for the backward (harness/tolerance.h)
//                       and, for a previous step whose forward differs, what delta from its O
//                       alone moves (BwdRowRef::dq_prev; tolerance.h, add_from_prev_o)
// Rows are named by their flattened index over all heads: (b·H + h)·seq_q + i for a query row,
// (b·KVH + kv)·seq_k + j for a key row (KVH = H without grouped-query attention); results hold
// the chosen rows in the order given.
#pragma once
#include <cstddef>
#include <vector>

#include "attention_inputs.h"

namespace fa::attention {

struct HeadRef {
  std::vector<std::size_t> heads;     // flattened b·H + h
  std::vector<std::size_t> kv_heads;  // backward: the K/V heads (b·KVH + kv) those read, ascending
  std::vector<double> o, lse, dq;     // the query heads' outputs, one after the other
  std::vector<double> dk, dv;         // the K/V heads' gradients: with GQA summed over each group
};
// dq, dk, dv (and kv_heads) only with `backward`. With grouped-query attention dK and dV of a K/V
// head need the backward of every query head of its group, chosen or not.
HeadRef reference_heads(const AttnParams& a, bool backward, const Inputs& in, const std::vector<std::size_t>& heads);

// `n` of `count` heads spread evenly (first and last included); all of them when n >= count.
std::vector<std::size_t> spread_heads(std::size_t count, std::size_t n);

// `n` of the indices [0, total), ascending: 0, 1 (row 1 of head 0 is the large query row of
// make_inputs) and total - 1, then a golden-ratio sequence (evenly spread, and at every offset
// within a head, unlike a fixed stride). All of them when n is more than half of total.
std::vector<std::size_t> sample_rows(std::size_t total, std::size_t n);

struct RowRef {
  std::vector<std::size_t> rows;       // query rows
  std::vector<double> o, o_lowp, lse;  // [rows, head_dim] fp64 and low precision; [rows] fp64
};
RowRef reference_rows(const AttnParams& a, const Inputs& in, const std::vector<std::size_t>& rows);

struct BwdRowRef {
  std::vector<std::size_t> q_rows, k_rows;       // query rows (of dQ) and key rows (of dK, dV)
  std::vector<double> dq, dq_lowp;               // [q_rows, head_dim], fp64 and low precision
  std::vector<double> dk, dk_lowp, dv, dv_lowp;  // [k_rows, head_dim]
  // Where Inputs::o is given (the O the step's backward was given): fp64 throughout, but delta =
  // rowsum(dO∘O) of that O, so these differ from dq, dk by what O's rounding alone does to the
  // gradients (tolerance.h, lowp_row_bounds). dV does not depend on delta. Empty without a given O.
  std::vector<double> dq_given, dk_given;
  // With a second O (prev_o: a previous step's, when its forward differs from the step's): the same as
  // dq_given, dk_given for that O (tolerance.h, add_from_prev_o), from the same passes. Empty without one.
  std::vector<double> dq_prev, dk_prev;
};
// A key row needs the statistics of every query row of every query head that reads its K/V head:
// each such head costs two dot products per (query, key) pair, shared by the precisions, before its
// first key row (a query row asked for gets its dQ from the same pass), and with GQA a key row sums
// the dK, dV terms of its group's query heads. prev_o: a second O of Q's shape, or null.
BwdRowRef reference_bwd_rows(const AttnParams& a, const Inputs& in, const std::vector<std::size_t>& q_rows,
                             const std::vector<std::size_t>& k_rows, const std::vector<float>* prev_o = nullptr);

// The rows `ids` of a [rows, per_row] result, one after the other.
std::vector<float> gather_rows(const std::vector<float>& all, const std::vector<std::size_t>& ids, std::size_t per_row);

}  // namespace fa::attention
