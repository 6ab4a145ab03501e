/* Who else holds an environment: the live processes, other than this one, whose work a
 * prepare over it would end (src/backend/prepare.c asks before it replaces one). A local
 * environment is held by every manager process whose sandbox helper runs in it: its
 * sandboxed processes have the workspace at CAE_SANDBOX_ROOT, and their first ancestor
 * outside the sandbox that is neither bwrap nor cae-helper is the manager that started it. */
#include "backend/backend-internal.h"
#include "backend/sandbox.h"

#include "base/macro.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

#define HOLDERS_MAX 8

/* The parent of pid (/proc/<pid>/stat field 4), 0 when unknown. */
static long parent_of(long pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	buf[n > 0 ? n : 0] = '\0';
	const char *p = strrchr(buf, ')');
	long ppid = 0;
	if (!p || sscanf(p + 1, " %*c %ld", &ppid) != 1)
		return 0;
	return ppid;
}

/* True when pid's root shows the workspace (dev, ino) at CAE_SANDBOX_ROOT. */
static bool in_sandbox(long pid, dev_t dev, ino_t ino)
{
	char path[96];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/%ld/root" CAE_SANDBOX_ROOT, pid);
	return stat(path, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

/* True when pid runs bwrap or cae-helper (what lies between a manager and its sandbox). */
static bool plumbing(long pid)
{
	char path[64], exe[4096];
	snprintf(path, sizeof(path), "/proc/%ld/exe", pid);
	ssize_t n = readlink(path, exe, sizeof(exe) - 1);
	if (n <= 0)
		return false;
	exe[n] = '\0';
	const char *base = strrchr(exe, '/');
	base = base ? base + 1 : exe;
	return strncmp(base, "bwrap", 5) == 0 || strncmp(base, "cae-helper", 10) == 0;
}

static void comm_of(long pid, char *out, size_t size)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, out, size - 1) : -1;
	out[n > 0 ? n : 0] = '\0';
	out[strcspn(out, "\n")] = '\0';
}

int cae__sandbox_holders(const char *workspace_root, char *text, size_t size)
{
	text[0] = '\0';
	struct stat ws;
	if (!workspace_root || stat(workspace_root, &ws) != 0)
		return 0;
	long self = (long)getpid(), found[HOLDERS_MAX];
	int n = 0;
	DIR *d = opendir("/proc");
	if (!d)
		return 0;
	struct dirent *de;
	while ((de = readdir(d)) && n < HOLDERS_MAX) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		if (*end || pid <= 0 || !in_sandbox(pid, ws.st_dev, ws.st_ino))
			continue;
		long a = pid, manager = 0;
		for (int up = 0; up < 64; up++) {
			a = parent_of(a);
			if (a <= 1)
				break;
			if (a == self || (!in_sandbox(a, ws.st_dev, ws.st_ino) && !plumbing(a))) {
				manager = a;
				break;
			}
		}
		if (manager <= 1 || manager == self)
			continue;
		a = manager;
		bool seen = false;
		for (int i = 0; i < n; i++)
			seen |= found[i] == a;
		if (!seen)
			found[n++] = a;
	}
	closedir(d);
	size_t used = 0;
	for (int i = 0; i < n && used < size; i++) {
		char comm[32];
		comm_of(found[i], comm, sizeof(comm));
		int w = snprintf(text + used, size - used, "%spid %ld (%s)", i ? ", " : "",
				 found[i], comm);
		used += w > 0 ? (size_t)w : 0;
	}
	return n;
}
