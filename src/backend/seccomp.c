/* The local sandbox's seccomp filter (see seccomp.h): a deny list over a default of allow,
 * built with libseccomp for the native ABI (and i386 + x32 on x86_64), exported as the
 * classic BPF program that bwrap loads before it runs the sandbox's first program. */
#include "backend/seccomp.h"

#include "base/fs.h"
#include "base/macro.h"

#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/banned.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(scmp_filter_ctx, seccomp_release)

#define REFUSE SCMP_ACT_ERRNO(EPERM)

/* Refused whatever their arguments, by group (names separated by spaces). Names a given ABI
 * does not have (stime, vm86 on x86_64) are skipped for that ABI by libseccomp; names this
 * libseccomp does not know at all are skipped. */
static const char *const refused[] = {
    /* the kernel's key store: shared by every sandbox of one host uid, and the caller's */
    "add_key keyctl request_key",
    /* large kernel attack surfaces Docker refuses */
    "bpf perf_event_open userfaultfd io_uring_setup io_uring_enter io_uring_register "
    "fanotify_init",
    /* the kernel itself: kexec, modules, reboot, swap, accounting, its log, I/O ports,
     * obsolete calls */
    "kexec_load kexec_file_load init_module finit_module delete_module create_module "
    "get_kernel_syms query_module reboot swapon swapoff acct syslog iopl ioperm vhangup uselib "
    "ustat sysfs _sysctl nfsservctl lookup_dcookie vm86 vm86old",
    /* clocks */
    "clock_settime clock_settime64 clock_adjtime clock_adjtime64 settimeofday adjtimex stime",
    /* file handles (open_by_handle_at reaches files outside any mount a process sees) */
    "open_by_handle_at name_to_handle_at",
    /* mounts and quotas */
    "mount umount umount2 pivot_root open_tree move_mount fsopen fsconfig fsmount fspick "
    "mount_setattr quotactl quotactl_fd",
    /* other namespaces */
    "setns",
};

/* Every CLONE_NEW* flag: clone and unshare with any of them are refused. CLONE_NEWTIME
 * (0x80) overlaps the exit signal in clone's flags, so it is checked for unshare only. */
static const uint64_t ns_flags[] = {CLONE_NEWNS,   CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
				    CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET};
#define CAE_CLONE_NEWTIME 0x80ULL

/* personality(2) values Docker allows: PER_LINUX, PER_LINUX32, UNAME26 with either, and
 * 0xffffffff (a query). Every other value is refused. */
static const uint64_t personality_allowed[] = {0x0, 0x8, 0x20000, 0x20008, 0xffffffff};

static int rule(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n,
		const struct scmp_arg_cmp *cmp, cae_error *err)
{
	int nr = seccomp_syscall_resolve_name(name);
	if (nr == __NR_SCMP_ERROR)
		return 0;
	int r = seccomp_rule_add_array(ctx, action, nr, n, cmp);
	if (r < 0)
		return cae_error_set(err, r, "seccomp: cannot add the rule for %s: %s", name,
				     strerror(-r));
	return 0;
}

/* Refuses personality(v) for every v in [lo, hi]: libseccomp compares one argument once per
 * rule, so the range is cut into aligned power-of-two blocks, each one masked comparison. */
static int refuse_personality_range(scmp_filter_ctx ctx, uint64_t lo, uint64_t hi, cae_error *err)
{
	for (;;) {
		unsigned k = lo ? (unsigned)__builtin_ctzll(lo) : 63;
		while (k > 0 && lo + ((1ULL << k) - 1) > hi)
			k--;
		uint64_t low_bits = (1ULL << k) - 1;
		struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_MASKED_EQ, ~low_bits, lo);
		int r = rule(ctx, REFUSE, "personality", 1, &c, err);
		if (r < 0)
			return r;
		if (lo + low_bits >= hi)
			return 0;
		lo += low_bits + 1;
	}
}

static int add_rules(scmp_filter_ctx ctx, cae_error *err)
{
	int r;
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++) {
		char names[512];
		snprintf(names, sizeof(names), "%s", refused[i]);
		for (char *save = NULL, *n = strtok_r(names, " ", &save); n;
		     n = strtok_r(NULL, " ", &save))
			if ((r = rule(ctx, REFUSE, n, 0, NULL, err)) < 0)
				return r;
	}
	for (size_t i = 0; i < ARRAY_SIZE(ns_flags); i++) {
		struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]);
		if ((r = rule(ctx, REFUSE, "clone", 1, &c, err)) < 0 ||
		    (r = rule(ctx, REFUSE, "unshare", 1, &c, err)) < 0)
			return r;
	}
	struct scmp_arg_cmp newtime =
	    SCMP_A0(SCMP_CMP_MASKED_EQ, CAE_CLONE_NEWTIME, CAE_CLONE_NEWTIME);
	if ((r = rule(ctx, REFUSE, "unshare", 1, &newtime, err)) < 0)
		return r;
	/* clone3's flags are behind a pointer: ENOSYS, and libc uses clone instead */
	if ((r = rule(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL, err)) < 0)
		return r;
	/* personality: the gaps between the allowed values, then everything above 32 bits */
	uint64_t lo = 0;
	for (size_t i = 0; i < ARRAY_SIZE(personality_allowed); i++) {
		uint64_t v = personality_allowed[i];
		if (v > lo && (r = refuse_personality_range(ctx, lo, v - 1, err)) < 0)
			return r;
		lo = v + 1;
	}
	struct scmp_arg_cmp above = SCMP_A0(SCMP_CMP_GT, 0xffffffffULL);
	return rule(ctx, REFUSE, "personality", 1, &above, err);
}

static int fill_bpf(void *ctx, int fd)
{
	int r = seccomp_export_bpf((scmp_filter_ctx)ctx, fd);
	return r < 0 ? r : 0;
}

int cae__seccomp_write(int dirfd, const char *name, cae_error *err)
{
	_cleanup_(seccomp_releasep) scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return cae_error_set(err, -ENOMEM, "seccomp: cannot make a filter");
	int r;
	/* a system call of an ABI the filter does not cover is refused, not killed */
	if ((r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, REFUSE)) < 0)
		return cae_error_set(err, r, "seccomp: %s", strerror(-r));
	/* 32-bit system calls on x86_64 (int 0x80, and x32) get the same rules */
	if (seccomp_arch_native() == SCMP_ARCH_X86_64) {
		const uint32_t arches[] = {SCMP_ARCH_X86, SCMP_ARCH_X32};
		for (size_t i = 0; i < ARRAY_SIZE(arches); i++)
			if ((r = seccomp_arch_add(ctx, arches[i])) < 0 && r != -EEXIST)
				return cae_error_set(err, r, "seccomp: cannot add an ABI: %s",
						     strerror(-r));
	}
	if ((r = add_rules(ctx, err)) < 0)
		return r;
	r = cae__write_atomic(dirfd, name, 0644, 0, fill_bpf, ctx);
	if (r < 0)
		return cae_error_set(err, r, "seccomp: cannot write the filter: %s", strerror(-r));
	return 0;
}
