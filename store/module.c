/* SPDX-License-Identifier: MIT */
/* libopjit-store.so: the store as a module the agent's writer thread dlopen()s. */
#include "store.h"

__attribute__((visibility("default"))) const st_api_t opjit_store_api = {
    .abi = ST_API_ABI,
    .errstr = st_errstr,
    .open = st_open,
    .close = st_close,
    .run_begin = st_run_begin,
    .run_flush = st_run_flush,
    .run_end = st_run_end,
    .run_samples = st_run_samples,
    .run_variants = st_run_variants,
    .profile = st_profile,
    .profile_free = st_profile_free,
    .machine_save = st_machine_save,
    .machine_load = st_machine_load,
    .run_series = st_run_series,
    .crash = st_crash,
    .run_warm = st_run_warm,
    .object = st_object,
    .hot_free = st_hot_free,
    .shelf = st_shelf,
    .crashed = st_crashed,
};
