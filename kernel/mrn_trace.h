/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Tracepoints of mrnotify.ko: a registration's life (register, mark,
 * drain, unregister) and the work a change leaves to its owner (defer).
 * For users asking why a registration was dropped, and for mrnotify-audit:
 *   echo 1 > /sys/kernel/tracing/events/mrnotify/enable
 * A context is shown as a hashed pointer, the same for all its events.
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM mrnotify

#if !defined(MRN_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define MRN_TRACE_H

#include <linux/tracepoint.h>

#define mrn_show_reason(r)						\
	__print_symbolic(r, { MRN_REASON_UNKNOWN, "unknown" },		\
			 { MRN_REASON_UNMAP, "unmap" },			\
			 { MRN_REASON_CLEAR, "clear" },			\
			 { MRN_REASON_RELEASE, "release" },		\
			 { MRN_REASON_MIGRATE, "migrate" },		\
			 { MRN_REASON_EXCLUSIVE, "exclusive" },		\
			 { MRN_REASON_PROTECTION, "protection" },	\
			 { MRN_REASON_OTHER, "other" })

TRACE_EVENT(mrn_register,
	TP_PROTO(const void *ctx, u64 id, unsigned long start,
		 unsigned long last, u64 cookie),
	TP_ARGS(ctx, id, start, last, cookie),
	TP_STRUCT__entry(
		__field(const void *, ctx)
		__field(u64, id)
		__field(unsigned long, start)
		__field(unsigned long, last)
		__field(u64, cookie)
	),
	TP_fast_assign(
		__entry->ctx = ctx;
		__entry->id = id;
		__entry->start = start;
		__entry->last = last;
		__entry->cookie = cookie;
	),
	TP_printk("ctx=%p id=%#llx range=[%#lx-%#lx] cookie=%#llx",
		  __entry->ctx, __entry->id, __entry->start, __entry->last,
		  __entry->cookie)
);

TRACE_EVENT(mrn_mark,
	TP_PROTO(const void *ctx, u64 id, unsigned long start,
		 unsigned long last, u8 reason, u8 flags),
	TP_ARGS(ctx, id, start, last, reason, flags),
	TP_STRUCT__entry(
		__field(const void *, ctx)
		__field(u64, id)
		__field(unsigned long, start)
		__field(unsigned long, last)
		__field(u8, reason)
		__field(u8, flags)
	),
	TP_fast_assign(
		__entry->ctx = ctx;
		__entry->id = id;
		__entry->start = start;
		__entry->last = last;
		__entry->reason = reason;
		__entry->flags = flags;
	),
	TP_printk("ctx=%p id=%#llx range=[%#lx-%#lx] reason=%s%s%s",
		  __entry->ctx, __entry->id, __entry->start, __entry->last,
		  mrn_show_reason(__entry->reason),
		  __entry->flags & MRN_ENTRY_AT_END ? " at_end" : "",
		  __entry->flags & MRN_ENTRY_DEFERRED ? " deferred" : "")
);

TRACE_EVENT(mrn_defer,
	TP_PROTO(const void *mm, unsigned long start, unsigned long last,
		 u8 reason, bool merged),
	TP_ARGS(mm, start, last, reason, merged),
	TP_STRUCT__entry(
		__field(const void *, mm)
		__field(unsigned long, start)
		__field(unsigned long, last)
		__field(u8, reason)
		__field(bool, merged)
	),
	TP_fast_assign(
		__entry->mm = mm;
		__entry->start = start;
		__entry->last = last;
		__entry->reason = reason;
		__entry->merged = merged;
	),
	TP_printk("mm=%p range=[%#lx-%#lx] reason=%s%s", __entry->mm,
		  __entry->start, __entry->last,
		  mrn_show_reason(__entry->reason),
		  __entry->merged ? " merged" : "")
);

TRACE_EVENT(mrn_drain,
	TP_PROTO(const void *ctx, u32 count, bool more, u64 generation),
	TP_ARGS(ctx, count, more, generation),
	TP_STRUCT__entry(
		__field(const void *, ctx)
		__field(u32, count)
		__field(bool, more)
		__field(u64, generation)
	),
	TP_fast_assign(
		__entry->ctx = ctx;
		__entry->count = count;
		__entry->more = more;
		__entry->generation = generation;
	),
	TP_printk("ctx=%p count=%u%s generation=%llu", __entry->ctx,
		  __entry->count, __entry->more ? " more" : "",
		  __entry->generation)
);

TRACE_EVENT(mrn_unregister,
	TP_PROTO(const void *ctx, u64 id, bool was_dirty),
	TP_ARGS(ctx, id, was_dirty),
	TP_STRUCT__entry(
		__field(const void *, ctx)
		__field(u64, id)
		__field(bool, was_dirty)
	),
	TP_fast_assign(
		__entry->ctx = ctx;
		__entry->id = id;
		__entry->was_dirty = was_dirty;
	),
	TP_printk("ctx=%p id=%#llx%s", __entry->ctx, __entry->id,
		  __entry->was_dirty ? " was_dirty" : "")
);

#endif /* MRN_TRACE_H */

/* Out of tree: the header is found in the module's own folder. */
#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE mrn_trace
#include <trace/define_trace.h>
