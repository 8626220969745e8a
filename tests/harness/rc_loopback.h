// SPDX-License-Identifier: BSD-3-Clause
//
// A reliable-connected QP pair on one RDMA device, connected to each other
// (loopback), for tests that need real ibv_reg_mr pinning and real RDMA
// transfers: Soft-RoCE (rxe0) in the guest. Everything is RAII; failures
// throw VerbsError with the call that failed and its errno.
#ifndef MRN_TESTS_RC_LOOPBACK_H
#define MRN_TESTS_RC_LOOPBACK_H

#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace mrn::test {

class VerbsError : public std::runtime_error {
public:
	VerbsError(const std::string &what, int err);
	int error() const { return err_; }

private:
	int err_;
};

template <typename T, int (*Destroy)(T *)>
struct VerbsDeleter {
	void operator()(T *p) const { Destroy(p); }
};
using ContextPtr = std::unique_ptr<ibv_context, VerbsDeleter<ibv_context, ibv_close_device>>;
using PdPtr = std::unique_ptr<ibv_pd, VerbsDeleter<ibv_pd, ibv_dealloc_pd>>;
using CqPtr = std::unique_ptr<ibv_cq, VerbsDeleter<ibv_cq, ibv_destroy_cq>>;
using QpPtr = std::unique_ptr<ibv_qp, VerbsDeleter<ibv_qp, ibv_destroy_qp>>;
using MrPtr = std::unique_ptr<ibv_mr, VerbsDeleter<ibv_mr, ibv_dereg_mr>>;

// Access rights a test MR gets: enough to be the source or target of RDMA
// WRITE and READ.
constexpr int kFullAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ;

class RcLoopback {
public:
	// device: a name ("rxe0"), or empty for the first device. The GID index
	// is the first RoCE v2 IPv4 GID unless MRNOTIFY_TEST_GID_INDEX says.
	explicit RcLoopback(const std::string &device = "");

	ibv_pd *pd() const { return pd_.get(); }
	const std::string &device_name() const { return name_; }

	MrPtr reg_mr(void *addr, size_t len, int access = kFullAccess) const;

	// RDMA WRITE len bytes from (src, src_lkey) through QP a into
	// (dst, dst_rkey) on QP b's side, and wait for its completion.
	void rdma_write(const void *src, uint32_t src_lkey, void *dst, uint32_t dst_rkey,
			size_t len);

private:
	void connect(ibv_qp *qp, uint32_t remote_qpn);
	void wait_completion(uint64_t wr_id);

	std::string name_;
	ContextPtr ctx_;
	PdPtr pd_;
	CqPtr cq_;
	QpPtr a_;
	QpPtr b_;
	int gid_index_ = -1;
	ibv_gid gid_{};
	uint8_t port_ = 1;
	uint64_t next_wr_id_ = 1;
};

// Anonymous private memory at `at` (MAP_FIXED) or anywhere; with `raw`
// through the system call itself, behind libc's and Open MPI's hooks.
// nullptr on failure.
inline char *map_anon(void *at, size_t len, bool raw = false)
{
	const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0);
	void *p = raw ? reinterpret_cast<void *>(
				syscall(SYS_mmap, at, len, PROT_READ | PROT_WRITE, flags, -1, 0))
		      : mmap(at, len, PROT_READ | PROT_WRITE, flags, -1, 0);
	return p == MAP_FAILED ? nullptr : static_cast<char *>(p);
}

// Whether every one of the len bytes at p is c (what an RDMA WRITE left).
inline bool all_are(const char *p, size_t len, char c)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != c)
			return false;
	return true;
}

} // namespace mrn::test

#endif
