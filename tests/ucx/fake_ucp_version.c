/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Preloaded before libmrnotify-ucx in the host tests: ucp_get_version()
 * reports UCX 1.19.0, newer than any the plugin knows, so that its guard
 * against another UCX can be tested with the UCX that is installed. Only
 * the version the plugin reads
 * changes; everything else is the installed UCX's.
 */
void ucp_get_version(unsigned *major_version, unsigned *minor_version, unsigned *release_number);

void ucp_get_version(unsigned *major_version, unsigned *minor_version, unsigned *release_number)
{
	*major_version = 1;
	*minor_version = 19;
	*release_number = 0;
}
