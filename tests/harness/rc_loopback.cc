// SPDX-License-Identifier: BSD-3-Clause
#include "rc_loopback.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace mrn::test {

VerbsError::VerbsError(const std::string &what, int err)
    : std::runtime_error(what + ": " + std::strerror(err)), err_(err)
{}

namespace {

[[noreturn]] void fail(const std::string &what, int err = errno)
{
	throw VerbsError(what, err ? err : EIO);
}

// First RoCE v2 GID that carries an IPv4 address (rxe's ::ffff:a.b.c.d).
int find_gid_index(ibv_context *ctx, uint8_t port)
{
	if (const char *env = std::getenv("MRNOTIFY_TEST_GID_INDEX"))
		return std::atoi(env);
	ibv_port_attr pattr{};
	if (ibv_query_port(ctx, port, &pattr))
		fail("ibv_query_port");
	for (int i = 0; i < pattr.gid_tbl_len; i++) {
		ibv_gid_entry e{};
		if (ibv_query_gid_ex(ctx, port, static_cast<uint32_t>(i), &e, 0))
			continue;
		const uint8_t *g = e.gid.raw;
		const bool v4mapped = std::all_of(g, g + 10, [](uint8_t b) { return b == 0; }) &&
				      g[10] == 0xff && g[11] == 0xff;
		if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && v4mapped)
			return i;
	}
	// InfiniBand link layers have no RoCE GIDs; index 0 is right there.
	return pattr.link_layer == IBV_LINK_LAYER_INFINIBAND ? 0 : -1;
}

} // namespace

RcLoopback::RcLoopback(const std::string &device)
{
	int n = 0;
	ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		fail("ibv_get_device_list");
	std::unique_ptr<ibv_device *, void (*)(ibv_device **)> guard(list, ibv_free_device_list);
	ibv_device *dev = nullptr;
	for (int i = 0; i < n && !dev; i++)
		if (device.empty() || device == ibv_get_device_name(list[i]))
			dev = list[i];
	if (!dev)
		fail("no RDMA device " + (device.empty() ? std::string("at all") : device), ENODEV);
	name_ = ibv_get_device_name(dev);
	ctx_.reset(ibv_open_device(dev));
	if (!ctx_)
		fail("ibv_open_device " + name_);
	pd_.reset(ibv_alloc_pd(ctx_.get()));
	if (!pd_)
		fail("ibv_alloc_pd");
	cq_.reset(ibv_create_cq(ctx_.get(), 64, nullptr, nullptr, 0));
	if (!cq_)
		fail("ibv_create_cq");
	gid_index_ = find_gid_index(ctx_.get(), port_);
	if (gid_index_ < 0)
		fail("no RoCE v2 IPv4 GID on " + name_ + " (is the netdev up with an address?)",
		     ENODEV);
	if (ibv_query_gid(ctx_.get(), port_, gid_index_, &gid_))
		fail("ibv_query_gid");

	ibv_qp_init_attr init{};
	init.send_cq = cq_.get();
	init.recv_cq = cq_.get();
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_wr = 16;
	init.cap.max_recv_wr = 16;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	init.sq_sig_all = 1;
	a_.reset(ibv_create_qp(pd_.get(), &init));
	b_.reset(ibv_create_qp(pd_.get(), &init));
	if (!a_ || !b_)
		fail("ibv_create_qp");
	connect(a_.get(), b_->qp_num);
	connect(b_.get(), a_->qp_num);
}

void RcLoopback::connect(ibv_qp *qp, uint32_t remote_qpn)
{
	ibv_qp_attr a{};
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = port_;
	a.qp_access_flags = kFullAccess;
	int rc = ibv_modify_qp(
		qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (rc)
		fail("ibv_modify_qp INIT", rc);

	a = {};
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = remote_qpn;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid_;
	a.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index_);
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = port_;
	rc = ibv_modify_qp(qp, &a,
			   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER);
	if (rc)
		fail("ibv_modify_qp RTR", rc);

	a = {};
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	rc = ibv_modify_qp(qp, &a,
			   IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	if (rc)
		fail("ibv_modify_qp RTS", rc);
}

MrPtr RcLoopback::reg_mr(void *addr, size_t len, int access) const
{
	MrPtr mr(ibv_reg_mr(pd_.get(), addr, len, access));
	if (!mr)
		fail("ibv_reg_mr");
	return mr;
}

void RcLoopback::rdma_write(const void *src, uint32_t src_lkey, void *dst, uint32_t dst_rkey,
			    size_t len)
{
	ibv_sge sge{};
	sge.addr = reinterpret_cast<uintptr_t>(src);
	sge.length = static_cast<uint32_t>(len);
	sge.lkey = src_lkey;
	ibv_send_wr wr{};
	wr.wr_id = next_wr_id_++;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst);
	wr.wr.rdma.rkey = dst_rkey;
	ibv_send_wr *bad = nullptr;
	const int rc = ibv_post_send(a_.get(), &wr, &bad);
	if (rc)
		fail("ibv_post_send", rc);
	wait_completion(wr.wr_id);
}

void RcLoopback::wait_completion(uint64_t wr_id)
{
	using clock = std::chrono::steady_clock;
	const auto deadline = clock::now() + std::chrono::seconds(30);
	for (;;) {
		ibv_wc wc{};
		const int n = ibv_poll_cq(cq_.get(), 1, &wc);
		if (n < 0)
			fail("ibv_poll_cq", EIO);
		if (n == 1) {
			if (wc.status != IBV_WC_SUCCESS)
				fail(std::string("work completion: ") +
					     ibv_wc_status_str(wc.status),
				     EIO);
			if (wc.wr_id == wr_id)
				return;
		}
		if (clock::now() > deadline)
			fail("no completion within 30 s", ETIMEDOUT);
	}
}

} // namespace mrn::test
