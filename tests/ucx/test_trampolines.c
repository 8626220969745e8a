/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The UCX plugin's trampolines in assembly (ucx-plugin/entry_<arch>.S),
 * without UCX: this program stands in for the shim's C side (the hot word,
 * the pointers the trampolines jump through, the slow path and the binding
 * call) and calls a UCP entry point (ucp_put_nbx), ucs_rcache_get and a
 * wrapped function (ucs_rcache_create) with ten integer arguments, more
 * than either architecture passes in registers. Each path must reach its
 * function with every argument as it was passed and return its result:
 *   - not bound yet: the binding call first (which here writes every
 *     argument register, as a C function may), then the function it bound;
 *   - the generation unchanged: straight to UCX's function;
 *   - moved, or checks counted: the slow path first, told which kind of
 *     function called it, then UCX's function.
 * Run natively by make check (x86-64), and built for aarch64 and run under
 * qemu-aarch64 by test_trampolines_arm64.sh. Prints TAP.
 */
#include "entry_hot.h"
#include "entry_list.h"

#include <stdint.h>
#include <stdio.h>

#define ARGS10 long a0, long a1, long a2, long a3, long a4, long a5, long a6, long a7, long a8, long a9

mrn_ucx_hot_t mrn_ucx_hot;
/* The pointers as the shim starts them: at the stubs that bind. */
#define REAL(name)                                                                                 \
	extern char mrn_ucx_unbound_##name[];                                                      \
	void *mrn_ucx_real_##name = mrn_ucx_unbound_##name;
REAL(ucs_rcache_get)
MRN_UCX_WRAPPED(REAL)
MRN_UCX_ENTRIES(REAL)

static volatile uint64_t generation;
static int slow_calls, slow_kind = -1, bind_calls, misaligned;
static const char *last;

/* What the trampolines' callers see: ten integer arguments. */
long ucp_put_nbx(ARGS10);
long ucs_rcache_get(ARGS10);
long ucs_rcache_create(ARGS10);

static long check_args(const char *who, ARGS10)
{
	last = who;
	if (a0 != 10 || a1 != 11 || a2 != 12 || a3 != 13 || a4 != 14 || a5 != 15 || a6 != 16 ||
	    a7 != 17 || a8 != 18 || a9 != 19)
		return -1;
	return 1000 + a9;
}

static long real_put(ARGS10) { return check_args("put", a0, a1, a2, a3, a4, a5, a6, a7, a8, a9); }
static long real_get(ARGS10) { return check_args("get", a0, a1, a2, a3, a4, a5, a6, a7, a8, a9); }
static long real_create(ARGS10) { return check_args("create", a0, a1, a2, a3, a4, a5, a6, a7, a8, a9); }

/* A C function may write every argument register: these do. */
static inline void clobber_argument_registers(void)
{
#if defined(__x86_64__)
	__asm__ volatile("mov $-1, %%rdi; mov $-1, %%rsi; mov $-1, %%rdx; mov $-1, %%rcx;"
			 "mov $-1, %%r8; mov $-1, %%r9; mov $-1, %%rax; mov $-1, %%r10;"
			 "mov $-1, %%r11"
			 ::: "rdi", "rsi", "rdx", "rcx", "r8", "r9", "rax", "r10", "r11");
#elif defined(__aarch64__)
	__asm__ volatile("mov x0, #-1; mov x1, #-1; mov x2, #-1; mov x3, #-1; mov x4, #-1;"
			 "mov x5, #-1; mov x6, #-1; mov x7, #-1; mov x8, #-1; mov x9, #-1;"
			 "mov x16, #-1; mov x17, #-1"
			 ::: "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x16",
			     "x17");
#endif
}

static void note_alignment(void)
{
	/* The stack is 16-byte aligned at any call (the ABI's promise to C). */
	char probe __attribute__((aligned(16)));
	misaligned += ((uintptr_t)&probe & 15) != 0;
}

/* The shim's slow path, as the assembly reaches it. */
__attribute__((noinline, used)) void mrn_ucx_entry_slow(int kind)
{
	note_alignment();
	slow_calls++;
	slow_kind = kind;
	__atomic_store_n(&mrn_ucx_hot.seen, generation, __ATOMIC_RELAXED);
	clobber_argument_registers();
}

/* The shim's binding, as a stub reaches it: fills in the pointer it was given. */
__attribute__((noinline, used)) void mrn_ucx_bind_call(void **real)
{
	note_alignment();
	bind_calls++;
	if (real == &mrn_ucx_real_ucp_put_nbx)
		*real = (void *)real_put;
	else if (real == &mrn_ucx_real_ucs_rcache_get)
		*real = (void *)real_get;
	else if (real == &mrn_ucx_real_ucs_rcache_create)
		*real = (void *)real_create;
	clobber_argument_registers();
}

static int tests;
static int failures;

static void expect(int ok, const char *what)
{
	printf("%s %d - %s\n", ok ? "ok" : "not ok", ++tests, what);
	failures += !ok;
}

int main(void)
{
	long r;

	mrn_ucx_hot.generation = &generation;
	generation = 5;
	mrn_ucx_hot.seen = 5;

	r = ucp_put_nbx(10, 11, 12, 13, 14, 15, 16, 17, 18, 19);
	expect(bind_calls == 1 && mrn_ucx_real_ucp_put_nbx == (void *)real_put,
	       "trampoline, not bound: the binding call, given the trampoline's pointer");
	expect(r == 1019 && last[0] == 'p',
	       "... then the function it bound, with every argument as passed, though the binding wrote the argument registers");
	r = ucp_put_nbx(10, 11, 12, 13, 14, 15, 16, 17, 18, 19);
	expect(r == 1019 && slow_calls == 0 && bind_calls == 1,
	       "trampoline, bound, generation unchanged: UCX's function, every argument, its result");

	generation = 6;
	r = ucp_put_nbx(10, 11, 12, 13, 14, 15, 16, 17, 18, 19);
	expect(slow_calls == 1 && mrn_ucx_hot.seen == 6 && slow_kind == MRN_UCX_SLOW_ENTRY,
	       "trampoline, generation moved: the slow path (a drain) first, told an entry point called");
	expect(r == 1019, "... then UCX's function with every argument as passed, though the slow path wrote the argument registers");

	mrn_ucx_hot.count_checks = 1;
	r = ucp_put_nbx(10, 11, 12, 13, 14, 15, 16, 17, 18, 19);
	expect(slow_calls == 2 && r == 1019, "trampoline, checks counted: the slow path, then UCX's function");
	mrn_ucx_hot.count_checks = 0;

	r = ucs_rcache_get(10, 11, 12, 13, 14, 15, 16, 17, 18, 19);
	expect(r == 1019 && bind_calls == 2 && slow_calls == 2 && last[0] == 'g',
	       "ucs_rcache_get, not bound: bound, then UCX's function, every argument");
	mrn_ucx_hot.count_checks = 1;
	r = ucs_rcache_get(10, 11, 12, 13, 14, 15, 16, 17, 18, 19);
	expect(r == 1019 && slow_calls == 3 && slow_kind == MRN_UCX_SLOW_GET && last[0] == 'g',
	       "ucs_rcache_get, checks counted: the slow path, told ucs_rcache_get called, every argument");
	mrn_ucx_hot.count_checks = 0;
	generation = 7;
	r = ucs_rcache_get(10, 11, 12, 13, 14, 15, 16, 17, 18, 19);
	expect(r == 1019 && slow_calls == 4 && mrn_ucx_hot.seen == 7 && last[0] == 'g',
	       "ucs_rcache_get, generation moved: the slow path that drains first, every argument");

	generation = 8;
	r = ucs_rcache_create(10, 11, 12, 13, 14, 15, 16, 17, 18, 19);
	expect(r == 1019 && bind_calls == 3 && last[0] == 'c',
	       "a wrapped function, not bound: bound, then its function, every argument");
	r = ucs_rcache_create(10, 11, 12, 13, 14, 15, 16, 17, 18, 19);
	expect(r == 1019 && bind_calls == 3 && slow_calls == 4,
	       "a wrapped function, bound: straight to its function, no compare (the generation moved)");
	expect(misaligned == 0, "the slow path and the binding called on a 16-byte aligned stack");

	printf("1..%d\n", tests);
	return failures != 0;
}
