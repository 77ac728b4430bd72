// SPDX-License-Identifier: Apache-2.0
// OpenMP after fork(): libgomp's thread pool does not survive fork, so a child whose parent had run a
// parallel region hangs in its next one (multiprocessing's fork workers, torch's DataLoader workers).
// A child forked after pasa's first parallel region therefore runs parallel_for on its calling thread
// alone; a child forked before it keeps its threads.
#pragma once

namespace pasa {

// Called before each parallel region: from then on, children forked from this process know that its
// OpenMP pool exists (the first call registers the fork handler that tells them).
void note_parallel_region();

// Whether this process was forked from one that had run a parallel region (its pool is gone).
bool forked_after_parallel_region();

}  // namespace pasa
