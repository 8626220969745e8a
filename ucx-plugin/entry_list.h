/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Every public UCP function, in one of two lists (preprocessor only: the
 * assembly includes it too). check-entries.sh reads both at build time and
 * fails when the UCX headers being built against declare a ucp_ function in
 * neither: a new way into UCP's cache must be looked at, not missed.
 *
 * MRN_UCX_ENTRIES: from UCX 1.14 on UCP looks its own cache up inline
 * (ucp_memh_get(): ucs_rcache_lookup_unsafe()), so each public function that
 * can look a registration up, or progress requests posted earlier whose
 * buffers are registered later (rendezvous), gets a trampoline that compares
 * the generation and drains before it jumps to UCX's function: the dead
 * ranges become ucm_vm_munmap(), queued on UCP's cache, whose next lookup
 * then misses and applies the queue in ucs_rcache_get().
 */
#ifndef MRN_UCX_ENTRY_LIST_H
#define MRN_UCX_ENTRY_LIST_H

/* clang-format off */
#define MRN_UCX_ENTRIES(X) \
	X(ucp_tag_send_nb) \
	X(ucp_tag_send_nbr) \
	X(ucp_tag_send_sync_nb) \
	X(ucp_tag_send_nbx) \
	X(ucp_tag_send_sync_nbx) \
	X(ucp_tag_recv_nb) \
	X(ucp_tag_recv_nbr) \
	X(ucp_tag_recv_nbx) \
	X(ucp_tag_msg_recv_nb) \
	X(ucp_tag_msg_recv_nbx) \
	X(ucp_stream_send_nb) \
	X(ucp_stream_send_nbx) \
	X(ucp_stream_recv_nb) \
	X(ucp_stream_recv_nbx) \
	X(ucp_am_send_nb) \
	X(ucp_am_send_nbx) \
	X(ucp_am_recv_data_nbx) \
	X(ucp_put) \
	X(ucp_put_nb) \
	X(ucp_put_nbi) \
	X(ucp_put_nbx) \
	X(ucp_get) \
	X(ucp_get_nb) \
	X(ucp_get_nbi) \
	X(ucp_get_nbx) \
	X(ucp_atomic_op_nbx) \
	X(ucp_atomic_post) \
	X(ucp_atomic_fetch_nb) \
	X(ucp_atomic_add32) \
	X(ucp_atomic_add64) \
	X(ucp_atomic_fadd32) \
	X(ucp_atomic_fadd64) \
	X(ucp_atomic_swap32) \
	X(ucp_atomic_swap64) \
	X(ucp_atomic_cswap32) \
	X(ucp_atomic_cswap64) \
	X(ucp_mem_map) \
	X(ucp_memh_pack) \
	X(ucp_rkey_pack) \
	X(ucp_worker_progress) \
	X(ucp_worker_flush) \
	X(ucp_worker_flush_nb) \
	X(ucp_worker_flush_nbx) \
	X(ucp_ep_flush) \
	X(ucp_ep_flush_nb) \
	X(ucp_ep_flush_nbx) \
	X(ucp_ep_close_nb) \
	X(ucp_ep_close_nbx) \
	X(ucp_ep_destroy) \
	X(ucp_disconnect_nb)

/*
 * Interposed without the compare: the functions the backend wraps
 * (activation, each cache's callbacks, the fork story). Until the shim has
 * bound to the process's UCX they bind first; then each jumps to the
 * backend's function where a backend serves the running UCX, else to the
 * function of the same name in the process's own UCX (or rdma-core).
 */
#define MRN_UCX_WRAPPED(X) \
	X(ucp_init_version) \
	X(ucs_rcache_create) \
	X(ucs_rcache_destroy) \
	X(ucm_set_event_handler) \
	X(ucm_test_external_events) \
	X(ibv_fork_init)

/*
 * The rest, read in UCX 1.13 to 1.23 (openucx/ucx, src/ucp; ucp_device_*
 * from 1.20, whose 1.20 ucp_device_mem_list_create became the local and
 * remote ones in 1.21): none looks a
 * registration up in UCP's cache or progresses posted requests. They take
 * handles made earlier (a memh, an rkey, a request), query or configure,
 * create or destroy objects, or wait for an event after which the caller
 * progresses. The flushes and closes above progress the worker inside.
 */
#define MRN_UCX_NO_LOOKUP(X) \
	X(ucp_am_data_release) X(ucp_cleanup) X(ucp_config_modify) X(ucp_config_print) \
	X(ucp_config_read) X(ucp_config_release) X(ucp_conn_request_query) \
	X(ucp_context_print_info) X(ucp_context_query) X(ucp_device_counter_init) \
	X(ucp_device_counter_read) X(ucp_device_get_mem_list_length) \
	X(ucp_device_local_mem_list_create) X(ucp_device_mem_list_create) \
	X(ucp_device_mem_list_release) \
	X(ucp_device_remote_mem_list_create) X(ucp_dt_create_generic) X(ucp_dt_destroy) \
	X(ucp_dt_query) X(ucp_ep_create) X(ucp_ep_evaluate_perf) X(ucp_ep_modify_nb) \
	X(ucp_ep_print_info) X(ucp_ep_query) X(ucp_ep_rkey_unpack) X(ucp_get_version) \
	X(ucp_get_version_string) X(ucp_init) X(ucp_init_version) X(ucp_lib_query) \
	X(ucp_listener_create) X(ucp_listener_destroy) X(ucp_listener_query) \
	X(ucp_listener_reject) X(ucp_mem_advise) X(ucp_mem_print_info) X(ucp_mem_query) \
	X(ucp_mem_unmap) X(ucp_memh_buffer_release) X(ucp_request_alloc) \
	X(ucp_request_cancel) X(ucp_request_check_status) X(ucp_request_free) \
	X(ucp_request_is_completed) X(ucp_request_query) X(ucp_request_release) \
	X(ucp_request_test) X(ucp_rkey_buffer_release) X(ucp_rkey_compare) \
	X(ucp_rkey_destroy) X(ucp_rkey_ptr) X(ucp_stream_data_release) \
	X(ucp_stream_recv_data_nb) X(ucp_stream_recv_request_test) \
	X(ucp_stream_worker_poll) X(ucp_tag_probe_nb) X(ucp_tag_recv_request_test) \
	X(ucp_worker_address_query) X(ucp_worker_arm) X(ucp_worker_create) \
	X(ucp_worker_destroy) X(ucp_worker_fence) X(ucp_worker_get_address) \
	X(ucp_worker_get_efd) X(ucp_worker_print_info) X(ucp_worker_query) \
	X(ucp_worker_release_address) X(ucp_worker_set_am_handler) \
	X(ucp_worker_set_am_recv_handler) X(ucp_worker_signal) X(ucp_worker_wait) \
	X(ucp_worker_wait_mem)
/* clang-format on */

#endif
