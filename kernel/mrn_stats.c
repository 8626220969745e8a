// SPDX-License-Identifier: GPL-2.0
/*
 * The module's usage figures: per-CPU counters and the two gauges, shown
 * in debugfs (internals, not ABI) and in the device's sysfs attributes
 * (ABI, docs/kernel-abi.md).
 */

#include <linux/atomic.h>
#include <linux/build_bug.h>
#include <linux/debugfs.h>
#include <linux/device.h>
#include <linux/percpu.h>
#include <linux/sysfs.h>

#include <linux/mrnotify.h>

#include "mrn_internal.h"

#define CREATE_TRACE_POINTS
#include "mrn_trace.h"

static const char * const mrn_counter_names[MRN_NR_COUNTERS] = {
	[MRN_CNT_UNMAP] = "callbacks_unmap",
	[MRN_CNT_CLEAR] = "callbacks_clear",
	[MRN_CNT_PROTECTION_VMA] = "callbacks_protection_vma",
	[MRN_CNT_PROTECTION_PAGE] = "callbacks_protection_page",
	[MRN_CNT_SOFT_DIRTY] = "callbacks_soft_dirty",
	[MRN_CNT_RELEASE] = "callbacks_release",
	[MRN_CNT_MIGRATE] = "callbacks_migrate",
	[MRN_CNT_EXCLUSIVE] = "callbacks_exclusive",
	[MRN_CNT_OTHER] = "callbacks_other",
	[MRN_CNT_INVALIDATED] = "invalidated",
	[MRN_CNT_MARKED_AT_END] = "marked_at_end",
	[MRN_CNT_DEFERRED] = "deferred",
	[MRN_CNT_DEFERRED_MERGED] = "deferred_merged",
	[MRN_CNT_IGNORED] = "ignored",
	[MRN_CNT_DRAINED] = "drained",
	[MRN_CNT_UNREGISTERED_DIRTY] = "unregistered_dirty",
	[MRN_CNT_USER_LIMIT] = "user_limit_hits",
	[MRN_CNT_NOTIFIERS] = "notifiers_registered",
};

DEFINE_PER_CPU(struct mrn_pcpu_stats, mrn_pcpu_stats);
atomic_long_t mrn_nr_contexts = ATOMIC_LONG_INIT(0);
atomic_long_t mrn_nr_regs = ATOMIC_LONG_INIT(0);
static struct dentry *mrn_debugfs;
/* Maxima over every callback; written as zero to start a measurement. */
static atomic64_t mrn_max_hold_ns = ATOMIC64_INIT(0);
static atomic64_t mrn_max_marks = ATOMIC64_INIT(0);

static void mrn_raise(atomic64_t *max, u64 v)
{
	s64 old = atomic64_read(max);

	while ((u64)old < v) {
		if (atomic64_try_cmpxchg(max, &old, v))
			break;
	}
}

void mrn_note_callback(u64 hold_ns, unsigned int marks)
{
	mrn_raise(&mrn_max_hold_ns, hold_ns);
	mrn_raise(&mrn_max_marks, marks);
}

static_assert(ARRAY_SIZE(mrn_counter_names) == MRN_NR_COUNTERS);

/*
 * /sys/kernel/debug/mrnotify/: one value per file, root only. Module-wide
 * sums over all processes, so a test can see what happened to a context
 * whose owner has exited. Not ABI.
 */
static u64 mrn_counter_sum(enum mrn_counter c)
{
	u64 sum = 0;
	int cpu;

	for_each_possible_cpu(cpu)
		sum += READ_ONCE(per_cpu_ptr(&mrn_pcpu_stats, cpu)->count[c]);
	return sum;
}

static int mrn_counter_get(void *data, u64 *val)
{
	*val = mrn_counter_sum((uintptr_t)data);
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(mrn_counter_fops, mrn_counter_get, NULL, "%llu\n");

static int mrn_gauge_get(void *data, u64 *val)
{
	*val = atomic_long_read(data);
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(mrn_gauge_fops, mrn_gauge_get, NULL, "%llu\n");

static int mrn_max_get(void *data, u64 *val)
{
	*val = atomic64_read(data);
	return 0;
}

static int mrn_max_set(void *data, u64 val)
{
	if (val)
		return -EINVAL;
	atomic64_set(data, 0);
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(mrn_max_fops, mrn_max_get, mrn_max_set, "%llu\n");

void mrn_stats_init(void)
{
	unsigned int c;

	/* Best effort: debugfs may be disabled or locked down. */
	mrn_debugfs = debugfs_create_dir(KBUILD_MODNAME, NULL);
	for (c = 0; c < MRN_NR_COUNTERS; c++)
		debugfs_create_file_unsafe(mrn_counter_names[c], 0400,
					   mrn_debugfs, (void *)(uintptr_t)c,
					   &mrn_counter_fops);
	debugfs_create_file_unsafe("contexts", 0400, mrn_debugfs,
				   &mrn_nr_contexts, &mrn_gauge_fops);
	debugfs_create_file_unsafe("registrations", 0400, mrn_debugfs,
				   &mrn_nr_regs, &mrn_gauge_fops);
	debugfs_create_file_unsafe("max_callback_hold_ns", 0600, mrn_debugfs,
				   &mrn_max_hold_ns, &mrn_max_fops);
	debugfs_create_file_unsafe("max_callback_marks", 0600, mrn_debugfs,
				   &mrn_max_marks, &mrn_max_fops);
	/* Tests only: see mrn_debug_generation_step. */
	debugfs_create_u32("debug_generation_step", 0600, mrn_debugfs,
			   &mrn_debug_generation_step);
}

void mrn_stats_exit(void)
{
	debugfs_remove_recursive(mrn_debugfs);
}

/*
 * /sys/class/misc/mrnotify/: module-wide usage, one value per file. ABI
 * (docs/kernel-abi.md), unlike debugfs: mrnotify-check and monitoring read
 * these. Root only, as the sums span every user's processes.
 */
static ssize_t contexts_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%ld\n", atomic_long_read(&mrn_nr_contexts));
}

static ssize_t registrations_show(struct device *dev, struct device_attribute *attr,
				  char *buf)
{
	return sysfs_emit(buf, "%ld\n", atomic_long_read(&mrn_nr_regs));
}

static ssize_t invalidated_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%llu\n", mrn_counter_sum(MRN_CNT_INVALIDATED));
}

static ssize_t drained_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%llu\n", mrn_counter_sum(MRN_CNT_DRAINED));
}

static ssize_t user_limit_hits_show(struct device *dev, struct device_attribute *attr,
				    char *buf)
{
	return sysfs_emit(buf, "%llu\n", mrn_counter_sum(MRN_CNT_USER_LIMIT));
}

static DEVICE_ATTR_ADMIN_RO(contexts);
static DEVICE_ATTR_ADMIN_RO(registrations);
static DEVICE_ATTR_ADMIN_RO(invalidated);
static DEVICE_ATTR_ADMIN_RO(drained);
static DEVICE_ATTR_ADMIN_RO(user_limit_hits);

static struct attribute *mrn_attrs[] = {
	&dev_attr_contexts.attr,
	&dev_attr_registrations.attr,
	&dev_attr_invalidated.attr,
	&dev_attr_drained.attr,
	&dev_attr_user_limit_hits.attr,
	NULL
};

static const struct attribute_group mrn_group = {
	.attrs = mrn_attrs,
};

const struct attribute_group *mrn_groups[] = {
	&mrn_group,
	NULL
};
