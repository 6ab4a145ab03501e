/* cae doctor, the local backend's checks: the state directory, bubblewrap and cae-helper,
 * user namespaces, the sandbox itself (the very probe commands get: backend-local.c), the
 * seccomp filter, cgroups (v2, delegation, the pids, memory and cpu controllers) and the
 * loop file system that bounds a workspace's disk. */
#include "backend/doctor.h"

#include "backend/backend-internal.h"
#include "backend/diskfs.h"
#include "backend/sandbox.h"
#include "base/fs.h"
#include "cae/helper.h"
#include "cae/runner.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/banned.h"

/* A sysctl's integer value, -1 when the file is absent or unreadable. */
static long sysctl_value(const char *path)
{
	_cleanup_free_ char *text = NULL;
	size_t len;
	if (cae__read_file(AT_FDCWD, path, 64, &text, &len) < 0)
		return -1;
	return strtol(text, NULL, 10);
}

/* Whether this process can make a user namespace: tried in a child (a threaded process
 * cannot). 0 or the errno. */
static int try_userns(void)
{
	pid_t pid = fork();
	if (pid < 0)
		return errno;
	if (pid == 0)
		_exit(unshare(CLONE_NEWUSER) == 0 ? 0 : (errno & 0x7f));
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return errno;
	return WIFEXITED(status) ? WEXITSTATUS(status) : EIO;
}

static void check_userns(json_t *checks, bool required)
{
	long max = sysctl_value("/proc/sys/user/max_user_namespaces");
	long clone = sysctl_value("/proc/sys/kernel/unprivileged_userns_clone");
	long aa = sysctl_value("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
	bool root = geteuid() == 0;
	int e = try_userns();
	const char *fix = NULL;
	if (max == 0)
		fix = "sysctl -w user.max_user_namespaces=15000 (and in /etc/sysctl.d/)";
	else if (!root && clone == 0)
		fix = "sysctl -w kernel.unprivileged_userns_clone=1 (and in /etc/sysctl.d/)";
	else if (!root && aa == 1)
		fix = "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor "
		      "profile that lets bwrap make user namespaces";
	else
		fix = "a kernel with user namespaces (CONFIG_USER_NS), or run cae as root";
	cae__doctor_add(checks, "user namespaces", e == 0, required, fix,
			"%s (user.max_user_namespaces %ld%s%s)",
			e == 0 ? "this process can make one" : strerror(e), max,
			clone >= 0 ? clone ? ", unprivileged_userns_clone 1"
					   : ", unprivileged_userns_clone 0"
				   : "",
			aa == 1 ? ", apparmor_restrict_unprivileged_userns 1" : "");
}

/* The v2 controllers this process's cgroup offers ("" when v1 or unknown). */
static void own_controllers(char *buf, size_t size, bool *v2)
{
	buf[0] = '\0';
	*v2 = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0;
	if (!*v2)
		return;
	_cleanup_free_ char *text = NULL;
	size_t len;
	if (cae__read_file(AT_FDCWD, "/proc/self/cgroup", 65536, &text, &len) < 0)
		return;
	char *p = strstr(text, "0::");
	if (!p)
		return;
	p += 3;
	p[strcspn(p, "\n")] = '\0';
	char path[4200];
	snprintf(path, sizeof(path), "/sys/fs/cgroup%s/cgroup.controllers",
		 strcmp(p, "/") == 0 ? "" : p);
	_cleanup_free_ char *ctl = NULL;
	if (cae__read_file(AT_FDCWD, path, 4096, &ctl, &len) == 0) {
		ctl[strcspn(ctl, "\n")] = '\0';
		snprintf(buf, size, "%s: %s", p, ctl);
	}
}

static void check_cgroups(const cae_config *cfg, json_t *checks)
{
	cae_sandbox_limits lim = {
	    .pids = cfg->command_executor.docker.resources.pids_limit,
	    .memory_bytes = cfg->command_executor.docker.resources.memory_bytes,
	    .cpus = cfg->command_executor.docker.resources.cpu_limit,
	};
	char name[64];
	snprintf(name, sizeof(name), "doctor-%ld", (long)getpid());
	char **procs = NULL;
	size_t n = 0;
	int r = cae__sandbox_cgroup_setup(name, &lim, &procs, &n);
	for (size_t i = 0; i < n; i++)
		free(procs[i]);
	free(procs);
	cae__sandbox_cgroup_remove(name);
	bool v2;
	char ctl[512];
	own_controllers(ctl, sizeof(ctl), &v2);
	cae__doctor_add(
	    checks, "cgroups", r == 0, false,
	    "give cae a cgroup it may write with the pids, memory and cpu controllers delegated "
	    "(run it as root, or under systemd with Delegate=yes: systemd-run --user --scope -p "
	    "Delegate=yes cae ...); without one, commands are bounded by rlimits per process",
	    "%s (cgroup %s%s%s)",
	    r == 0 ? "a cgroup with pids, memory and cpu bounds can be made for a sandbox"
		   : "no cgroup can be made for a sandbox (not writable, or the controllers are "
		     "not delegated)",
	    v2 ? "v2" : "v1", ctl[0] ? "; this process's cgroup " : "", ctl);
}

static void check_disk(const cae_config *cfg, json_t *checks)
{
	if (cfg->command_executor.docker.resources.disk_bytes == 0) {
		cae__doctor_add(checks, "disk bound", true, false, NULL,
				"off (command_executor.docker.resources.disk_limit is 0)");
		return;
	}
	const char *why = NULL;
	int r = cae__diskfs_usable(&why);
	const char *fix = "run cae as root on a host with the loop driver (modprobe loop) and "
			  "mkfs.ext4 (apt-get install e2fsprogs); without them only each file is "
			  "bounded, not a workspace's total";
	cae__doctor_add(checks, "disk bound", r == 0, false, fix, "%s%s",
			r == 0 ? "a workspace gets a loop file system of disk_limit"
			       : "a workspace's total disk use is not bounded: ",
			r == 0 ? ""
			: why  ? why
			       : "unknown reason");
}

void cae__doctor_local(const cae_config *cfg, json_t *checks)
{
	bool unconfined = cfg->command_executor.local.unconfined;
	bool sandbox = cfg->command_executor.local.sandbox != CAE_CONFIG_SANDBOX_NONE;
	/* with unconfined: true, commands run without a sandbox where there is none */
	bool need = sandbox && !unconfined;
	cae__doctor_state_dir(cfg, checks, true);
	_cleanup_free_ char *bwrap = NULL, *helper = NULL;
	bool have_bwrap = cae_runner_find_program("bwrap", NULL, &bwrap) == 0;
	cae__doctor_add(checks, "bubblewrap", have_bwrap, need,
			"apt-get install bubblewrap (or set command_executor.local.unconfined: "
			"true to run commands unconfined)",
			"%s", have_bwrap ? bwrap : "bwrap is not on PATH");
	bool have_helper = cae_helper_find(&helper) == 0;
	cae__doctor_add(checks, "cae-helper", have_helper, need,
			"install cae-helper next to cae (ninja -C build installs both), or set "
			"CAE_HELPER to its path",
			"%s", have_helper ? helper : "not found next to cae nor on PATH");
	check_userns(checks, need);
	if (!sandbox) {
		cae__doctor_add(checks, "sandbox", unconfined, true,
				"set command_executor.local.sandbox: auto (bubblewrap)",
				"off: command_executor.local.sandbox is none, commands run "
				"unconfined");
		return;
	}
	cae_backend *b = NULL;
	cae_error err = {0};
	int r = cae__local_backend_new(cfg, NULL, &b, &err);
	const char *why = err.message, *seccomp_why = "no sandbox";
	if (r == 0)
		r = cae__local_probe(b, &why, &seccomp_why);
	char fix[1200];
	snprintf(fix, sizeof(fix), "%s%s",
		 !have_bwrap || !have_helper ? "see bubblewrap and cae-helper above; "
					     : "see user namespaces above; ",
		 unconfined
		     ? "meanwhile commands run unconfined (command_executor.local.unconfined)"
		     : "or set command_executor.local.unconfined: true to run commands "
		       "unconfined");
	cae__doctor_add(checks, "sandbox", r == 0, need, fix, "%s%s",
			r == 0 ? "a bubblewrap sandbox starts as commands get it" : "",
			r == 0 ? "" : why);
	cae__doctor_add(checks, "seccomp", r == 0 && !seccomp_why, false,
			"a kernel with seccomp filters (CONFIG_SECCOMP_FILTER) and libseccomp2; "
			"without it keyctl, bpf, io_uring and the like are not refused",
			"%s",
			r == 0 && !seccomp_why ? "the filter loads in the sandbox"
			: seccomp_why	       ? seccomp_why
					       : "no sandbox");
	check_cgroups(cfg, checks);
	check_disk(cfg, checks);
	cae_backend_free(b);
}
