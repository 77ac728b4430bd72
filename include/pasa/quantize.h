// SPDX-License-Identifier: Apache-2.0
// pasa/quantize.h — SageAttention2's quantizers (algorithms.md section 4): A_hat = round(A / delta) per group,
// delta = max|A| over the group / qmax (qmax = 127 int8, 7 int4, 448 e4m3, 57344 e5m2).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pasa/format.h"

namespace pasa {

// Which rows of a [rows, D] operand share one scale. The group shapes follow the MMA layouts the CUDA
// kernels use (m16n8k32 for INT8, 16-row warp slabs of a query block):
//   tensor  one scale per (batch, head)
//   block   one per query block (s1 rows) or key block (s2 rows)
//   warp    queries: one per 16-row slab (one warp's MMA rows); keys: one per key block (every warp
//           reads the whole K block, so a per-warp K scale does not exist)
//   thread  queries: within each 16-row slab, rows r and r + 8 (the two rows one thread's A fragment
//           holds); keys: within each key block, the rows k with the same k mod 8 (one thread's B
//           fragment columns)
//   token   one per row
enum class Granularity { tensor, block, warp, thread, token };
enum class OperandRole { query, key };

std::string granularity_name(Granularity g);
Granularity parse_granularity(std::string_view text);  // throws pasa::Error naming the text

// The group index of row `row` (0-based within the head) for the role and block size; throws
// pasa::Error for a block size below 1, a negative row or a granularity out of the enum.
int quant_group(Granularity g, OperandRole role, int row, int block_rows);

// Quantizes `values` ([rows, cols], row-major) in place to `format` (integers round to nearest even
// and saturate; floats round to nearest even and saturate) and returns one dequantization scale per
// row (the scale of the row's group). A group whose values are all zero gets scale 0 and quantizes to
// zeros, so dequantization gives zeros back exactly. Throws pasa::Error, before changing anything,
// when `values` does not hold rows x cols values or holds one that is not finite, for a block size
// below 1 or a format check_format refuses. (Run by the emulator inside a call being interrupted,
// Ctrl-C from Python, it stops with an "interrupted" pasa::Error after quantizing part of `values`;
// called directly it never does.)
std::vector<double> quantize_rows(std::vector<float>& values, int rows, int cols, const Format& format,
                                  Granularity granularity, OperandRole role, int block_rows);

// Per-channel quantization of V ([rows, cols]): one scale per column; returns cols scales. Throws as
// quantize_rows does.
std::vector<double> quantize_columns(std::vector<float>& values, int rows, int cols, const Format& format);

}  // namespace pasa
