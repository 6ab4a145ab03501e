/* The process preparing an environment, recorded with it (a docker label; a field of a
 * local environment's metadata) so that any later process can tell a prepare still running
 * from one that died: an environment is either ready or visibly not. */
#include "backend/backend-internal.h"

#include "base/macro.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/banned.h"

static void read_line_file(const char *path, char *out, size_t size)
{
	out[0] = '\0';
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, out, size - 1) : -1;
	out[n > 0 ? n : 0] = '\0';
	out[strcspn(out, "\n")] = '\0';
}

/* This host and PID namespace: "<boot id>/<pid namespace>". */
static void host_identity(char *out, size_t size)
{
	char boot[64], ns[64];
	read_line_file("/proc/sys/kernel/random/boot_id", boot, sizeof(boot));
	ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
	ns[n > 0 ? n : 0] = '\0';
	snprintf(out, size, "%s/%s", boot[0] ? boot : "?", ns[0] ? ns : "?");
}

/* Start time of a process in clock ticks after boot (/proc/<pid>/stat field 22); 0 when
 * there is no such process. */
static unsigned long long process_start(long pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	read_line_file(path, buf, sizeof(buf));
	const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
	if (!p)
		return 0;
	/* after ")": state (field 3) ... starttime (field 22) */
	for (int field = 2; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	return p ? strtoull(p + 1, NULL, 10) : 0;
}

void cae__preparer_label(char *out, size_t size)
{
	char host[160];
	host_identity(host, sizeof(host));
	snprintf(out, size, "%s/%ld/%llu", host, (long)getpid(), process_start((long)getpid()));
}

bool cae__preparer_alive(const char *label, int64_t created, int timeout_s)
{
	char host[160];
	host_identity(host, sizeof(host));
	size_t hn = strlen(host);
	long pid;
	unsigned long long start;
	if (label && strncmp(label, host, hn) == 0 && label[hn] == '/' &&
	    sscanf(label + hn + 1, "%ld/%llu", &pid, &start) == 2 && pid > 0)
		return start != 0 && process_start(pid) == start;
	return created > 0 && (int64_t)time(NULL) - created < timeout_s;
}

void cae__preparer_tag(char *out, size_t size)
{
	snprintf(out, size, "%ld.%llu", (long)getpid(), process_start((long)getpid()));
}

bool cae__preparer_tag_alive(const char *tag)
{
	long pid;
	unsigned long long start;
	if (!tag || sscanf(tag, "%ld.%llu", &pid, &start) != 2 || pid <= 0 || start == 0)
		return false;
	return process_start(pid) == start;
}
