/* The attack suite's system calls (tests/attack/attack.sh compiles this inside the sandbox
 * with the host's gcc): each call Docker's default profile refuses, tried as a command
 * would, printed as "name=ok" or "name=ERRNAME". Arguments are the cheapest ones that
 * succeed without a filter where an unprivileged process may make the call at all, and
 * otherwise ones the kernel would reject with something other than EPERM (a bad descriptor,
 * a bad address), so that EPERM is the filter's answer.
 *
 *   syscalls             the refused calls
 *   syscalls allowed     calls that must keep working (personality queries, ptrace of a
 *                        child of ours, clone without namespaces)
 *   syscalls ptrace PID  attach to PID, and open its environ, mem and fd directory */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/timex.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void show(const char *name, long r)
{
	if (r >= 0)
		printf("%s=ok\n", name);
	else
		printf("%s=%s\n", name, strerrorname_np(errno));
	fflush(stdout);
}

#if defined(__x86_64__)
/* A system call through the i386 ABI (int 0x80), as a 32-bit program would make it. */
static long i386_call(long nr, long a, long b, long c)
{
	long r;
	__asm__ volatile("int $0x80" : "=a"(r) : "a"(nr), "b"(a), "c"(b), "d"(c) : "memory");
	if (r < 0 && r > -4096) {
		errno = (int)-r;
		return -1;
	}
	return r;
}
#endif

static int refused(void)
{
	show("keyctl", syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 1));
	show("add_key",
	     syscall(SYS_add_key, "user", "cae-attack", "v", 1, KEY_SPEC_SESSION_KEYRING));
	show("request_key",
	     syscall(SYS_request_key, "user", "cae-attack", NULL, KEY_SPEC_SESSION_KEYRING));
	uint32_t map[32] = {2 /* BPF_MAP_TYPE_ARRAY */, 4, 4, 1};
	show("bpf", syscall(SYS_bpf, 0 /* BPF_MAP_CREATE */, map, sizeof(map)));
	struct perf_event_attr pe = {.type = PERF_TYPE_SOFTWARE,
				     .size = sizeof(pe),
				     .config = PERF_COUNT_SW_TASK_CLOCK,
				     .disabled = 1,
				     .exclude_kernel = 1,
				     .exclude_hv = 1};
	show("perf_event_open", syscall(SYS_perf_event_open, &pe, 0, -1, -1, 0));
	show("userfaultfd", syscall(SYS_userfaultfd, O_CLOEXEC | 1 /* UFFD_USER_MODE_ONLY */));
	char params[120] = {0};
	show("io_uring_setup", syscall(SYS_io_uring_setup, 4, params));
	show("io_uring_enter", syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0));
	show("io_uring_register", syscall(SYS_io_uring_register, -1, 0, NULL, 0));
	show("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0));
	show("kexec_file_load", syscall(SYS_kexec_file_load, -1, -1, 0, "", 0));
	show("init_module", syscall(SYS_init_module, NULL, 0, ""));
	show("finit_module", syscall(SYS_finit_module, -1, "", 0));
	show("delete_module", syscall(SYS_delete_module, "cae_none", O_NONBLOCK));
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	show("clock_settime", syscall(SYS_clock_settime, CLOCK_REALTIME, &now));
	struct timex tx = {0};
	show("clock_adjtime", syscall(SYS_clock_adjtime, CLOCK_REALTIME, &tx));
	show("adjtimex", syscall(SYS_adjtimex, &tx));
	show("settimeofday", syscall(SYS_settimeofday, NULL, NULL));
	struct {
		struct file_handle h;
		unsigned char data[128];
	} fh = {.h.handle_bytes = 128};
	int mount_id;
	show("name_to_handle_at",
	     syscall(SYS_name_to_handle_at, AT_FDCWD, "/", &fh.h, &mount_id, 0));
	show("open_by_handle_at", syscall(SYS_open_by_handle_at, -1, &fh.h, O_RDONLY));
	show("personality_addr_no_randomize", syscall(SYS_personality, 0x0040000));
	show("personality_read_implies_exec", syscall(SYS_personality, 0x0400000));
	show("unshare_newuser", syscall(SYS_unshare, CLONE_NEWUSER));
	show("unshare_newns", syscall(SYS_unshare, CLONE_NEWNS));
	long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, NULL);
	if (pid == 0)
		_exit(0);
	if (pid > 0)
		waitpid((pid_t)pid, NULL, 0);
	show("clone_newuser", pid);
	uint64_t args[11] = {0, 0, 0, 0, SIGCHLD};
	pid = syscall(SYS_clone3, args, sizeof(args));
	if (pid == 0)
		_exit(0);
	if (pid > 0)
		waitpid((pid_t)pid, NULL, 0);
	show("clone3", pid);
	show("setns", syscall(SYS_setns, -1, 0));
	show("mount", syscall(SYS_mount, "none", "/tmp", NULL, MS_REMOUNT | MS_BIND, NULL));
	show("fsopen", syscall(SYS_fsopen, "tmpfs", 0));
	show("open_tree", syscall(SYS_open_tree, AT_FDCWD, "/tmp", 1 /* OPEN_TREE_CLONE */));
	show("pivot_root", syscall(SYS_pivot_root, "/tmp", "/tmp"));
	show("swapon", syscall(SYS_swapon, "/nonexistent", 0));
	show("reboot", syscall(SYS_reboot, 0, 0, 0, NULL));
	show("acct", syscall(SYS_acct, NULL));
	show("quotactl", syscall(SYS_quotactl, 0, NULL, 0, NULL));
#if defined(__x86_64__)
	/* the same refusals through the 32-bit ABIs: i386 (int 0x80) and x32 */
	show("i386_keyctl", i386_call(288, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 1));
	show("i386_stime", i386_call(25, 0, 0, 0));
	show("i386_personality", i386_call(136, 0x0040000, 0, 0));
	show("x32_keyctl",
	     syscall(0x40000000 | SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 1));
#endif
	return 0;
}

static int allowed(void)
{
	show("personality_query", syscall(SYS_personality, 0xffffffff));
	show("personality_linux", syscall(SYS_personality, PER_LINUX));
	long pid = syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, NULL);
	if (pid == 0)
		_exit(0);
	if (pid > 0)
		waitpid((pid_t)pid, NULL, 0);
	show("clone_plain", pid);
	/* a debugger's first step on a child of its own */
	pid_t child = fork();
	if (child == 0) {
		pause();
		_exit(0);
	}
	long r = ptrace(PTRACE_ATTACH, child, NULL, NULL);
	if (r == 0) {
		waitpid(child, NULL, 0);
		ptrace(PTRACE_DETACH, child, NULL, NULL);
	}
	show("ptrace_own_child", r);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	return 0;
}

static int trace(pid_t pid)
{
	long r = ptrace(PTRACE_ATTACH, pid, NULL, NULL);
	if (r == 0) {
		waitpid(pid, NULL, __WALL);
		ptrace(PTRACE_DETACH, pid, NULL, NULL);
	}
	show("ptrace_attach", r);
	const char *files[] = {"environ", "mem", "fd"};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char path[64], name[64];
		snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, files[i]);
		snprintf(name, sizeof(name), "open_%s", files[i]);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		show(name, fd);
		if (fd >= 0)
			close(fd);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 2 && strcmp(argv[1], "ptrace") == 0)
		return trace((pid_t)atoi(argv[2]));
	if (argc > 1 && strcmp(argv[1], "allowed") == 0)
		return allowed();
	return refused();
}
