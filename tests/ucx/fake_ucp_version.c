/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Preloaded before libmrnotify-ucx in the host tests: ucp_get_version()
 * reports UCX 1.17.0, so that the plugin's guard against another UCX can be
 * tested with the UCX that is installed. Only the version the plugin reads
 * changes; everything else is UCX 1.13's.
 */
void ucp_get_version(unsigned *major_version, unsigned *minor_version, unsigned *release_number);

void ucp_get_version(unsigned *major_version, unsigned *minor_version, unsigned *release_number)
{
	*major_version = 1;
	*minor_version = 17;
	*release_number = 0;
}
