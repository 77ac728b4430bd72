// SPDX-License-Identifier: Apache-2.0
// PASA's shifting matrix as it is stored, and the invariance that matrix really applies (algorithms.md section
// 3, the paper's Appendix A-C). One place for these constants: the emulator, the CUDA dispatch and the
// beta solver all call it.
//
// M = (I - beta/n J) * factor, stored in `format`: diagonal a' = fl((1 - beta/n) factor), off-diagonal
// -b' = fl(-(beta/n) factor); factor is alpha when the softmax scale is folded into M (scale=k), else 1.
// Every row of M sums to r = a' - (n - 1) b', so the block mean of S' = Q (M K)^T is r times the block
// mean of the unshifted scores. Writing the true scaled score through S' and its block mean s':
//   factor * S = (factor / (a' + b')) (S' + b' n s' / r)
//             = S' + G s' + (factor / (a' + b') - 1) (S' - s'),  with  G = factor / r - 1.
// G is the invariance ("Inv_Pam"): what the state update multiplies the pseudo-averages by. The last
// term is the error of the rounded diagonal on a score's deviation from its block mean: at most about
// 2^-11 |S' - s'| in fp16, below the rounding of S' itself. In exact arithmetic G = beta / (1 - beta);
// with rounded entries (and alpha folded in) it is not, and using beta / (1 - beta) instead biases the
// LSE by (G - beta/(1-beta)) times the global pseudo-average (64.41 against 63.5 at D = 128).
#pragma once

#include "pasa/format.h"

namespace pasa {

struct PasaShift {
  double diag;        // a', as stored
  double off;         // -b', as stored
  double invariance;  // G = factor / (a' - (n - 1) b') - 1, in fp64 from the stored entries
};

PasaShift pasa_shift(double beta, int n, double factor, const Format& format);

// pasa_shift's result, checked: throws pasa::Error unless the stored M's rows sum to an r of the factor's sign (G finite and above -1;
// a negative scale makes both negative): a beta
// too close to 1 for the block size n and the format rounds a' and (n - 1) b' to the same value, so
// that M is singular (r = 0, G infinite: every output NaN), or past each other (r < 0: M applies a beta
// above 1). Valid policies reach both, e.g. "pasa,s2=2,beta=0.99999". `factor` as for pasa_shift.
PasaShift check_pasa_shift(double beta, int n, double factor, const Format& format);

}  // namespace pasa
