// SPDX-License-Identifier: BSD-3-Clause
#include "map_count.h"

#include <cstdio>

namespace mrn {

uint64_t vm_max_map_count()
{
	unsigned long long max_maps = 65530; // the kernel's default
	if (FILE *f = std::fopen("/proc/sys/vm/max_map_count", "re")) {
		if (std::fscanf(f, "%llu", &max_maps) != 1)
			max_maps = 65530;
		std::fclose(f);
	}
	return max_maps;
}

} // namespace mrn
