/* SPDX-License-Identifier: MIT */
/* The `opjit` command's dispatcher (inspect/opjit.c) with its main renamed, so the inspect
 * fuzzer calls the commands exactly as the command line does, libFuzzer owning main. */
#define main ins_opjit_main
int ins_opjit_main(int argc, char **argv);
#include "inspect/opjit.c"
