/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * For the project's own tests, demo and benchmarks only; not installed.
 *
 * MRN_MONITOR_TEST_NO_INVALIDATION keeps idle entries but never hears of
 * unmaps, so it hands out stale registrations: it exists so that tests can
 * show the failure mrnotify prevents (a "blind" cache) and so that
 * benchmarks can time hits without a monitor. Never chosen by AUTO, never
 * accepted from the environment.
 */
#ifndef MRNOTIFY_TESTING_H
#define MRNOTIFY_TESTING_H

#include "mrnotify.h"

#define MRN_MONITOR_TEST_NO_INVALIDATION ((mrn_monitor_t)4)

#endif /* MRNOTIFY_TESTING_H */
