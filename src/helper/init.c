/* cae-helper --init [--lifetime SECONDS]: PID 1 of a container cae made.
 *
 *  - reaps every zombie re-parented to it;
 *  - kills what a dead `cae-helper --stream` left: a process whose parent is PID 1 lost the
 *    helper that ran it (the helper is a subreaper for the commands it runs, and processes
 *    an exec starts have no parent inside the container), so its process group is killed;
 *  - on SIGTERM, SIGINT or SIGHUP (docker stop), passes SIGTERM to every process, waits a
 *    moment, kills what is left and exits 0;
 *  - with a lifetime, exits after that many seconds without a manager: a connected
 *    `cae-helper --stream` signals SIGUSR1 now and then, and a container whose manager
 *    crashed (or leaked it) stops by itself. It then exits with CAE_INIT_EXPIRED so that a
 *    manager that comes back can tell expiry from a stop and start the container again.
 *    Only a SIGUSR1 from a process the engine started (an exec: its parent is outside the
 *    container, parent pid 0) counts: commands run as the same user and could send one, but
 *    every process they make has a parent inside. With PID 1 non-dumpable (main.c) and
 *    SIGSTOP/SIGKILL from inside a PID namespace never reaching its init, no command can
 *    keep a container beyond its lifetime.
 */
#include "cae/helper.h"
#include "helper/mux.h"

#include "base/timeutil.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/banned.h"

#define TICK_MS 1000
#define TERM_GRACE_MS 3000

static void reap(void)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

/* The parent pid and process group of pid from /proc/<pid>/stat; -1 when it is gone. */
static int stat_of(const char *pid, pid_t *ppid, pid_t *pgrp)
{
	char path[300], buf[512];
	snprintf(path, sizeof(path), "/proc/%s/stat", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* "pid (comm) state ppid pgrp ...": comm may hold anything, the last ')' ends it */
	char *p = strrchr(buf, ')');
	char state;
	int pp, pg;
	if (!p || sscanf(p + 1, " %c %d %d", &state, &pp, &pg) != 3)
		return -1;
	*ppid = pp;
	*pgrp = pg;
	return state == 'Z' ? -1 : 0;
}

/* True when /proc shows our own PID namespace (a container's): pids read there are ours to
 * signal. */
static bool own_proc(void)
{
	char self[32];
	ssize_t n = readlink("/proc/self", self, sizeof(self) - 1);
	if (n <= 0)
		return false;
	self[n] = '\0';
	return strcmp(self, "1") == 0;
}

/* Kills the process group of every live process whose parent is us. */
static void kill_orphans(void)
{
	if (!own_proc())
		return;
	DIR *d = opendir("/proc");
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		pid_t ppid, pgrp;
		if (stat_of(e->d_name, &ppid, &pgrp) < 0 || ppid != 1)
			continue;
		pid_t pid = (pid_t)strtol(e->d_name, NULL, 10);
		if (pgrp > 1)
			kill(-pgrp, SIGKILL);
		kill(pid, SIGKILL);
	}
	closedir(d);
}

/* True when sig came from a process whose parent is outside our PID namespace (a stream
 * helper started by an exec), not from one of its commands. */
static bool from_outside(const siginfo_t *si)
{
	if (si->si_code != SI_USER || si->si_pid <= 1)
		return false;
	char pid[24];
	snprintf(pid, sizeof(pid), "%d", (int)si->si_pid);
	pid_t ppid, pgrp;
	return stat_of(pid, &ppid, &pgrp) == 0 && ppid == 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: cae-helper --init [--lifetime SECONDS]\n");
	return 2;
}

int cae__helper_init_main(int argc, char **argv)
{
	long long lifetime_s = 0;
	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--lifetime") == 0 && i + 1 < argc) {
			char *end;
			lifetime_s = strtoll(argv[++i], &end, 10);
			if (*end || lifetime_s < 0)
				return usage();
		} else {
			return usage();
		}
	}
	/* kill(-1, ...) reaches every process this user may signal: only PID 1 of a PID namespace
	 * (a container) may do that. */
	if (getpid() != 1) {
		fprintf(stderr, "cae-helper --init: must be PID 1 (of a container)\n");
		return 2;
	}
	sigset_t set;
	sigemptyset(&set);
	int sigs[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1};
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaddset(&set, sigs[i]);
	sigprocmask(SIG_BLOCK, &set, NULL);
	int64_t last_contact = cae__now_ns();
	for (;;) {
		struct timespec tick = {TICK_MS / 1000, (TICK_MS % 1000) * 1000000L};
		siginfo_t si;
		int sig = sigtimedwait(&set, &si, &tick);
		if (sig == SIGUSR1 && from_outside(&si))
			last_contact = cae__now_ns();
		if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
			kill(-1, SIGTERM);
			int64_t until = cae__now_ns() + TERM_GRACE_MS * 1000000LL;
			while (cae__now_ns() < until) {
				reap();
				if (kill(-1, 0) < 0 && errno == ESRCH)
					break;
				nanosleep(&(struct timespec){0, 20 * 1000000L}, NULL);
			}
			kill(-1, SIGKILL);
			reap();
			return 0;
		}
		reap();
		if (sig < 0 || sig == SIGCHLD)
			kill_orphans();
		if (lifetime_s > 0 && cae__now_ns() - last_contact > lifetime_s * 1000000000LL) {
			kill(-1, SIGKILL);
			reap();
			return CAE_HELPER_INIT_EXPIRED;
		}
	}
}
