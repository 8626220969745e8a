// SPDX-License-Identifier: BSD-3-Clause
// mrnotify-ofi.h when libmrnotify was built without libfabric's headers:
// the symbols exist (the library's symbol list does not depend on how it
// was configured), and say so.
#include "mrnotify-ofi.h"

#include <cerrno>

extern "C" int mrn_ofi_import(void)
{
	return -ENOSYS;
}

extern "C" int mrn_ofi_monitor_stats(struct mrn_ofi_stats *stats, size_t size)
{
	return stats && size ? -ENODEV : -EINVAL;
}
