#include "runner/proctree.h"

#include "base/macro.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/banned.h"

#define MAX_TREE 65536
#define MAX_ACTIVE 256

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t active[MAX_ACTIVE];
static size_t n_active;

static void do_init(void)
{
	(void)prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
}

void cae__proctree_init(void)
{
	pthread_once(&once, do_init);
}

void cae__proctree_lock(void)
{
	pthread_mutex_lock(&lock);
}

void cae__proctree_unlock(void)
{
	pthread_mutex_unlock(&lock);
}

void cae__proctree_register(pid_t pid)
{
	if (n_active < MAX_ACTIVE)
		active[n_active++] = pid;
}

void cae__proctree_unregister(pid_t pid)
{
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < n_active; i++)
		if (active[i] == pid) {
			active[i] = active[--n_active];
			break;
		}
	pthread_mutex_unlock(&lock);
}

static bool is_active(pid_t pid)
{
	for (size_t i = 0; i < n_active; i++)
		if (active[i] == pid)
			return true;
	return false;
}

/* Parses "/proc/<pid>/task/<tid>/children" files (space-separated pids) of one process. */
static size_t children_of(pid_t pid, pid_t *out, size_t max)
{
	char path[64];
	if (pid == 0)
		snprintf(path, sizeof(path), "/proc/self/task");
	else
		snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	size_t n = 0;
	struct dirent *de;
	char buf[4096];
	while ((de = readdir(d)) && n < max) {
		if (de->d_name[0] == '.')
			continue;
		char cpath[384];
		if (snprintf(cpath, sizeof(cpath), "%.63s/%.255s/children", path, de->d_name) >=
		    (int)sizeof(cpath))
			continue;
		int fd = open(cpath, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		/* A long list is read in pieces; a number may straddle two reads. */
		long cur = -1;
		for (;;) {
			ssize_t r = read(fd, buf, sizeof(buf));
			if (r <= 0)
				break;
			for (ssize_t i = 0; i < r; i++) {
				char c = buf[i];
				if (c >= '0' && c <= '9') {
					cur = (cur < 0 ? 0 : cur * 10) + (c - '0');
				} else if (cur >= 0) {
					if (n < max)
						out[n++] = (pid_t)cur;
					cur = -1;
				}
			}
		}
		if (cur >= 0 && n < max)
			out[n++] = (pid_t)cur;
		close(fd);
	}
	closedir(d);
	return n;
}

size_t cae__proctree_descendants(pid_t pid, pid_t *out, size_t max)
{
	size_t n = children_of(pid, out, max);
	for (size_t i = 0; i < n && n < max; i++)
		n += children_of(out[i], out + n, max - n);
	return n;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

void cae__proctree_kill_tree(pid_t pid, int sig)
{
	pid_t *tree = malloc(MAX_TREE * sizeof(pid_t));
	if (sig == SIGKILL) {
		/* Freeze first so that nothing forks while we walk, then kill. */
		kill(-pid, SIGSTOP);
		kill(pid, SIGSTOP);
	}
	for (int round = 0; round < 50; round++) {
		kill(-pid, sig);
		kill(pid, sig);
		size_t n = tree ? cae__proctree_descendants(pid, tree, MAX_TREE) : 0;
		for (size_t i = 0; i < n; i++) {
			if (sig == SIGKILL)
				kill(tree[i], SIGSTOP);
			kill(tree[i], sig);
		}
		if (sig != SIGKILL || n == 0)
			break;
		/* Killed processes take a moment to exit; their own children get re-parented
		 * to the nearest subreaper and show up in the next walk if still alive. */
		sleep_ms(round < 5 ? 1 : 10);
		n = tree ? cae__proctree_descendants(pid, tree, MAX_TREE) : 0;
		bool alive = false;
		for (size_t i = 0; i < n && !alive; i++) {
			char p[64], state = 0;
			snprintf(p, sizeof(p), "/proc/%d/stat", (int)tree[i]);
			FILE *f = fopen(p, "re");
			if (!f)
				continue;
			/* pid (comm) state ...: comm may hold spaces and parens: take the last ')'.
			 */
			char line[512];
			if (fgets(line, sizeof(line), f)) {
				char *rp = strrchr(line, ')');
				if (rp && rp[1] == ' ')
					state = rp[2];
			}
			fclose(f);
			if (state && state != 'Z' && state != 'X')
				alive = true;
		}
		if (!alive)
			break;
	}
	free(tree);
}

void cae__proctree_reap_orphans(void)
{
	pid_t kids[1024];
	pthread_mutex_lock(&lock);
	for (int round = 0; round < 1000; round++) {
		size_t n = children_of(0, kids, ARRAY_SIZE(kids));
		size_t handled = 0;
		for (size_t i = 0; i < n; i++) {
			if (is_active(kids[i]))
				continue;
			cae__proctree_kill_tree(kids[i], SIGKILL);
			kill(kids[i], SIGKILL);
			kill(kids[i], SIGCONT);
			int st;
			while (waitpid(kids[i], &st, 0) < 0 && errno == EINTR)
				;
			handled++;
		}
		if (handled == 0)
			break;
	}
	pthread_mutex_unlock(&lock);
}
