/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * own_ucx_mid: stands in for a DSO-built MPI's UCX component (Open MPI's
 * mca_pml_ucx.so of a Spack or vendor stack): a library the program
 * dlopen()s, linked against UCX and finding its own copy of UCX through its
 * RUNPATH. preload-brings-nothing.sh builds it with the copy beside it.
 */
#include <ucp/api/ucp.h>

#include <stdio.h>

int own_ucx_run(void);

/* The UCX it got, and a UCP context made and dropped (where the plugin activates). */
int own_ucx_run(void)
{
	ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
	unsigned major, minor, release;
	ucp_config_t *config;
	ucp_context_h context;
	ucs_status_t status;

	ucp_get_version(&major, &minor, &release);
	printf("ucx %u.%u.%u\n", major, minor, release);
	status = ucp_config_read(NULL, NULL, &config);
	if (status != UCS_OK)
		return 1;
	status = ucp_init(&params, config, &context);
	ucp_config_release(config);
	if (status != UCS_OK) {
		printf("ucp_init: %s\n", ucs_status_string(status));
		return 1;
	}
	ucp_cleanup(context);
	return 0;
}
