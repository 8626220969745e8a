/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Preloaded before libmrnotify-ucx in the host tests: ucp_get_version()
 * reports UCX 1.99.0, newer than any the plugin knows, so that its guard
 * against another UCX can be tested with the UCX that is installed. Only
 * the version the plugin reads changes; everything else is the installed
 * UCX's. Newer, not older: UCX 1.23's ucp_init_version() compares the same
 * version with the API its caller was built for, and warns when it is
 * older.
 */
void ucp_get_version(unsigned *major_version, unsigned *minor_version, unsigned *release_number);

void ucp_get_version(unsigned *major_version, unsigned *minor_version, unsigned *release_number)
{
	*major_version = 1;
	*minor_version = 99;
	*release_number = 0;
}
