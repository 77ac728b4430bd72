// SPDX-License-Identifier: Apache-2.0
// The OpenMP team a parallel region may start. libgomp ends the process ("Thread creation failed",
// exit 1, no pasa error) when it cannot create a thread: each new thread reserves a stack
// (OMP_STACKSIZE, else the stack rlimit), so under an address-space limit (ulimit -v) a machine of
// many cores ran out of it before any data was allocated; and each counts against the user's
// process limit (ulimit -u).
#pragma once

namespace pasa {

// OpenMP's own team size, cut so that the threads it must create (those beyond the largest team the
// calling thread started before) take, with their stacks and malloc arenas and with the threads
// granted to other calling threads, at most half of the address space still free under a finite
// RLIMIT_AS, and can be created under a finite RLIMIT_NPROC (tried); at least 1 (the calling thread
// is no new one).
int parallel_team_size();

}  // namespace pasa
