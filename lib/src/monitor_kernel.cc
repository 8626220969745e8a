// SPDX-License-Identifier: BSD-3-Clause
//
// The kernel monitor: /dev/mrnotify (mrnotify.ko). Each entry is registered
// with the kernel before it is pinned; the kernel bumps the generation in
// the read-only status page before any unmap of it returns, and DRAIN names
// the registrations that died.
#include "log.h"
#include "monitor.h"

#include <linux/mrnotify.h>

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace mrn {

namespace {

class KernelMonitor final : public Monitor {
public:
	KernelMonitor(int fd, const mrn_status *status, size_t map_len, const uint32_t *words,
		      size_t words_len)
	    : fd_(fd), status_(status), map_len_(map_len), words_(words), words_len_(words_len)
	{}
	~KernelMonitor() override
	{
		if (fd_ < 0)
			return;
		if (words_)
			munmap(const_cast<uint32_t *>(words_), words_len_);
		munmap(const_cast<mrn_status *>(status_), map_len_);
		close(fd_);
	}
	const uint32_t *validity_words() const override { return words_; }
	const uint64_t *deferred_word() const override
	{
		return words_ ? reinterpret_cast<const uint64_t *>(&status_->deferred) : nullptr;
	}

	mrn_monitor_t kind() const override { return MRN_MONITOR_KERNEL; }
	const uint64_t *generation() const override
	{
		return reinterpret_cast<const uint64_t *>(&status_->generation);
	}
	bool keeps_idle_entries() const override { return true; }
	// mrn_poll: readable while a registration is dirty and not drained.
	int wait_fd() const override { return fd_; }

	int watch(uintptr_t start, uintptr_t end, uint64_t cookie, uint64_t *id) override
	{
		mrn_register r{};
		r.size = sizeof(r);
		r.addr = start;
		r.length = end - start;
		r.cookie = cookie;
		if (ioctl(fd_, MRN_IOC_REGISTER, &r) < 0)
			return -errno;
		*id = r.id;
		return 0;
	}

	int unwatch(uint64_t id) override
	{
		mrn_unregister u{};
		u.size = sizeof(u);
		u.id = id;
		const int rc = ioctl(fd_, MRN_IOC_UNREGISTER, &u);
		if (rc < 0) {
			// ESTALE (already drained or unregistered) or EINVAL
			// (never handed out) means a caller lost track of an
			// id: say so. The library's API has always called both
			// ENOENT.
			const int err = errno == ESTALE || errno == EINVAL ? ENOENT : errno;
			log(1, "unregister of kernel id %llu failed: %s",
			    static_cast<unsigned long long>(id), strerror(errno));
			return -err;
		}
		return rc; // MRN_UNREGISTER_WAS_DIRTY or 0
	}

	// The cache calls this under its writer lock, so one loop runs at a
	// time and the generation of its last call (no MORE) covers every
	// entry this loop handed to the sink: only then may the cache take it
	// as "seen". Two unserialised loops could each see the other's
	// generation before the other's entries are processed.
	int drain(InvalidationSink &sink, uint64_t *generation) override
	{
		// At most MRN_DRAIN_MAX_BATCH entries come back per call.
		std::array<mrn_dirty_entry, 256> batch;
		for (;;) {
			mrn_drain d{};
			d.size = sizeof(d);
			d.entries = reinterpret_cast<uintptr_t>(batch.data());
			d.capacity = batch.size();
			d.entry_size = sizeof(mrn_dirty_entry);
			if (ioctl(fd_, MRN_IOC_DRAIN, &d) < 0)
				return -errno;
			for (uint32_t i = 0; i < d.count; i++)
				sink.invalidate_cookie(batch[i].cookie, batch[i].id, batch[i].addr,
						       batch[i].addr + batch[i].length);
			if (!(d.out_flags & MRN_DRAIN_MORE)) {
				*generation = d.generation;
				return 0;
			}
		}
	}

	void abandon_after_fork() override
	{
		// The status page is not inherited (VM_DONTCOPY) and the
		// context answers only its owner: just let go of the fd.
		close(fd_);
		fd_ = -1;
	}

private:
	int fd_;
	const mrn_status *status_;
	size_t map_len_;
	const uint32_t *words_;
	size_t words_len_;
};

// The validity words, mapped (4 MiB of address space, backed by a page
// per 1024 slots the kernel has used); nullptr from a module without them,
// which the cache then never consults.
const uint32_t *map_validity_words(int fd, const mrn_status *status, size_t page,
				   size_t *len)
{
	if (!(status->features & MRN_FEATURE_VALIDITY))
		return nullptr;
	*len = (size_t{MRN_VALIDITY_SLOTS} * sizeof(uint32_t) + page - 1) / page * page;
	void *p = mmap(nullptr, *len, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(page));
	return p == MAP_FAILED ? nullptr : static_cast<const uint32_t *>(p);
}

} // namespace

bool kernel_abi_serves(uint32_t module_abi, std::string *why)
{
	if (MRN_ABI_SERVES(module_abi))
		return true;
	*why = "mrnotify.ko speaks ABI " + std::to_string(module_abi) + ", older than this library's " +
	       std::to_string(MRN_ABI_VERSION);
	return false;
}

std::unique_ptr<Monitor> make_kernel_monitor(int *err, std::string *why)
{
	const int fd = open(MRN_DEVICE_PATH, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		*err = -errno;
		*why = std::string(MRN_DEVICE_PATH) + ": " + strerror(errno) +
		       (errno == ENOENT   ? " (is mrnotify.ko loaded?)"
			: errno == EMFILE ? " (this user's contexts reached "
					    "/sys/module/mrnotify/parameters/max_user_contexts, "
					    "or this process holds 64)"
					  : "");
		return nullptr;
	}
	const size_t len = static_cast<size_t>(sysconf(_SC_PAGESIZE));
	void *p = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		*err = -errno;
		*why = std::string("mmap of the status page failed: ") + strerror(errno);
		close(fd);
		return nullptr;
	}
	const auto *status = static_cast<const mrn_status *>(p);
	if (!kernel_abi_serves(status->abi_version, why)) {
		*err = -EPROTO;
		munmap(p, len);
		close(fd);
		return nullptr;
	}
	size_t words_len = 0;
	const uint32_t *words = map_validity_words(fd, status, len, &words_len);
	*why = std::string(MRN_DEVICE_PATH) + " is open (the module speaks ABI " +
	       std::to_string(status->abi_version) + ", this library " +
	       std::to_string(MRN_ABI_VERSION) + (words ? "; validity words" : "") + ")";
	return std::make_unique<KernelMonitor>(fd, status, len, words, words_len);
}

} // namespace mrn
