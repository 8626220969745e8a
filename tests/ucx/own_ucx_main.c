/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * own_ucx_main LIBRARY: dlopen()s LIBRARY (own_ucx_mid.c) with RTLD_LOCAL,
 * as an MPI opens its components, runs it, and prints the file of every UCX
 * library mapped in the process ("map PATH"), to be checked against the
 * copy the library was built to find.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	int (*run)(void);
	char line[4096];
	void *h;
	FILE *maps;
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: own_ucx_main LIBRARY\n");
		return 2;
	}
	h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		fprintf(stderr, "own_ucx_main: %s\n", dlerror());
		return 2;
	}
	*(void **)&run = dlsym(h, "own_ucx_run");
	if (run == NULL)
		return 2;
	rc = run();
	maps = fopen("/proc/self/maps", "r");
	if (maps == NULL)
		return 2;
	while (fgets(line, sizeof(line), maps) != NULL) {
		const char *path = strchr(line, '/');

		if (path != NULL && (strstr(path, "/libucp.") || strstr(path, "/libuct.") ||
				     strstr(path, "/libucs.") || strstr(path, "/libucm.")))
			printf("map %s", path);
	}
	fclose(maps);
	return rc;
}
