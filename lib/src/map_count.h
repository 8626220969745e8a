// SPDX-License-Identifier: BSD-3-Clause
//
// How many mappings (VMAs) a process may have. Past vm.max_map_count every
// mmap of the process fails, and with it every malloc that needs one; what
// the library does that can split mappings (fork advice, userfaultfd
// registrations) is bounded by a share of it.
#ifndef MRN_MAP_COUNT_H
#define MRN_MAP_COUNT_H

#include <cstdint>

namespace mrn {

// /proc/sys/vm/max_map_count, or the kernel's default when unreadable.
uint64_t vm_max_map_count();

} // namespace mrn

#endif
