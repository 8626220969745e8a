/* SPDX-License-Identifier: BSD-3-Clause */
#define _GNU_SOURCE
#include "storm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int mrn_storm_option(struct mrn_storm_options *o, const char *arg)
{
	if (!strncmp(arg, "--size=", 7))
		o->size = strtoul(arg + 7, NULL, 0);
	else if (!strncmp(arg, "--rounds=", 9))
		o->rounds = atoi(arg + 9);
	else if (!strncmp(arg, "--threads=", 10))
		o->threads = atoi(arg + 10);
	else if (!strcmp(arg, "--fork"))
		o->fork = 1;
	else if (!strncmp(arg, "--expect=", 9))
		o->expect = arg + 9;
	else
		return 0;
	return 1;
}

int mrn_storm_options_check(const struct mrn_storm_options *o)
{
	return o->threads >= 1 && o->threads <= 2 && o->rounds >= 1 && o->size >= 4096 &&
			       o->size % 4096 == 0 &&
			       (!strcmp(o->expect, "correct") || !strcmp(o->expect, "corrupt"))
		       ? 0
		       : -1;
}

void mrn_fork_and_system(void)
{
	pid_t pid;

	if (system("true") != 0)
		mrn_replace_die("system");
	pid = fork();
	if (pid == 0)
		_exit(0);
	if (pid < 0 || waitpid(pid, NULL, 0) != pid)
		mrn_replace_die("fork");
}

void mrn_kinds_summary(char *line, size_t size, const enum mrn_kind *kinds, int n, const int *wrong)
{
	size_t len = 0;

	line[0] = 0;
	for (int i = 0; i < n && len < size; i++)
		len += (size_t)snprintf(line + len, size - len, "%s%s %d", i ? ", " : "",
					mrn_kind_name[kinds[i]], wrong[kinds[i]]);
}
