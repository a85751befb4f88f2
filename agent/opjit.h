/* SPDX-License-Identifier: MIT */
/* What a program that knows it may run under opjit can ask of it. Nothing here is needed: opjit
 * works on unmodified programs. A program (a benchmark, a test, a service that wants its kernels
 * before it takes traffic) looks the functions up at run time, so that it runs the same without
 * the agent:
 *
 *   int (*settle)(long) = (int (*)(long))dlsym(RTLD_DEFAULT, "opjit_settle");
 *   if (settle)
 *     settle(5000);
 */
#ifndef OPJIT_AGENT_OPJIT_H
#define OPJIT_AGENT_OPJIT_H

/* Waits until the JIT has no signature queued and no compile running (a compile's verification
 * and its duel against the original included, and the measurement of what a compile costs on
 * this CPU where one runs) and this CPU's machine model is final (loaded
 * settled, or measured again until it settles, 3 s at most: what calls too long for a duel
 * wait for), at most timeout_ms. Returns 0 once it is
 * idle, 1 when the time ran out first, -1 when opjit is not active in this process in jit mode
 * (OPJIT_MODE). Signatures that get hot after it returns are compiled as usual; one that waited
 * for the model is decided at its next call. */
int opjit_settle(long timeout_ms);

#endif
