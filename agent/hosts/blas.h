/* SPDX-License-Identifier: MIT */
/* What the BLAS host offers the tiers beyond its interposed symbols. */
#ifndef OPJIT_AGENT_HOSTS_BLAS_H
#define OPJIT_AGENT_HOSTS_BLAS_H

#include "../duel.h"
#include "../sig.h"
#include "../verify.h"
#include <stdint.h>

/* Duels variant, a kernel compiled for the BLAS signature key (called as run says: problem.h),
 * against the library's original (duel.h): both run on scratch operands of the key's shape, each
 * as far into a 64-byte line as offsets says (table.h, ag_entry_t.offsets: where the program's
 * lie), on the calling thread (the compile thread), within budget_ns. reps: runs of the variant
 * per call (1; more only for the tests' fault seam, a kernel made slower; -N: the original runs
 * N times per call, a kernel made to look faster). Returns 0 with *out filled, or
 * -1 when the signature cannot be duelled (not a BLAS operator, no original, its operands would
 * take more than 64 MB, no memory), -2 when the process is exiting (ag_exiting: no verdict, and
 * the kernel should not be published). The caller must not be inside an intercepted call. */
int ag_blas_duel(const ag_sig_t *key, void *variant, const ag_vrun_t *run, uint32_t offsets,
                 int reps, uint64_t budget_ns, ag_duel_result_t *out);

/* Checks variant, a kernel compiled for the BLAS signature key whose problem is g (called as run
 * says), against the library's original on the same scratch operands of g's
 * shape (verify.h, ag_verify_scratch), on the calling thread (the compile thread): the
 * signature's alpha and beta classes (1, 0, -1; any other 0.7 for alpha, 0.3 for beta, rounded
 * to the type), values from the key's seed. Returns 1 when the kernel matched the original
 * within the bound and wrote nothing outside its result, 0 when it did not (*out says how),
 * -1 when it was not checked (not a BLAS operator, no original, operands over 64 MB, no memory,
 * the original wrote outside its result), -2 when the process is exiting (ag_exiting: no
 * verdict, and the kernel should not be published). The caller must not be inside an
 * intercepted call. */
int ag_blas_check(const ag_sig_t *key, const jt_gemm_t *g, void *variant, const ag_vrun_t *run,
                  ag_scratch_t *out);

#endif
