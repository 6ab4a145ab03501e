/* Scratch directories named after their owner: see base/scratch.h. */
#include "base/scratch.h"

#include "base/fs.h"
#include "base/macro.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/banned.h"

unsigned long long cae__process_start_time(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	char *text = NULL;
	size_t len = 0;
	if (cae__read_file(AT_FDCWD, path, 4096, &text, &len) < 0)
		return 0;
	/* the command name (field 2) may hold spaces and parentheses: count after the last ')' */
	const char *p = strrchr(text, ')');
	unsigned long long start = 0;
	for (int field = 2; p && *p; p++) {
		if (*p != ' ')
			continue;
		if (++field == 22) {
			start = strtoull(p + 1, NULL, 10);
			break;
		}
	}
	free(text);
	return start;
}

static const char *tmp_base(const char *base)
{
	if (base && *base)
		return base;
	const char *t = getenv("TMPDIR");
	return t && *t ? t : "/tmp";
}

int cae__scratch_mkdtemp(const char *base, const char *prefix, char *out, size_t size)
{
	pid_t pid = getpid();
	int n = snprintf(out, size, "%s/%s%d-%llu.XXXXXX", tmp_base(base), prefix, (int)pid,
			 cae__process_start_time(pid));
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	if (!mkdtemp(out))
		return -errno;
	return 0;
}

bool cae__scratch_owner_dead(const char *name, const char *prefix, bool *owned)
{
	*owned = false;
	size_t pl = strlen(prefix);
	if (strncmp(name, prefix, pl) != 0)
		return false;
	const char *p = name + pl;
	char *end;
	errno = 0;
	long pid = strtol(p, &end, 10);
	if (end == p || *end != '-' || pid <= 0 || errno)
		return false;
	p = end + 1;
	unsigned long long start = strtoull(p, &end, 10);
	if (end == p || *end != '.')
		return false;
	*owned = true;
	unsigned long long now = cae__process_start_time((pid_t)pid);
	return now == 0 || now != start;
}

static int gc_dir(const char *dir, const char *prefix, int64_t legacy_age_s, unsigned *removed)
{
	DIR *d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	int ret = 0;
	size_t pl = strlen(prefix);
	time_t now = time(NULL);
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, prefix, pl) != 0)
			continue;
		bool owned;
		bool dead = cae__scratch_owner_dead(de->d_name, prefix, &owned);
		if (!owned) {
			struct stat st;
			if (legacy_age_s < 0 ||
			    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
			    st.st_uid != geteuid() || (int64_t)(now - st.st_mtime) <= legacy_age_s)
				continue;
			dead = true;
		}
		if (!dead)
			continue;
		/* an armed rollback snapshot protects a half-applied workspace: kept until it
		 * was restored (cae_worker_recover_snapshots) */
		char armed[512];
		snprintf(armed, sizeof(armed), "%s/armed", de->d_name);
		if (faccessat(dirfd(d), armed, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
			continue;
		int r = cae__rm_rf_at(dirfd(d), de->d_name);
		if (r == 0)
			(*removed)++;
		else if (ret == 0)
			ret = r;
	}
	closedir(d);
	return ret;
}

int cae__scratch_gc(const char *dir, const char *prefix, int64_t legacy_age_s, unsigned *removed)
{
	if (dir)
		return gc_dir(dir, prefix, legacy_age_s, removed);
	const char *t = tmp_base(NULL);
	int r = gc_dir(t, prefix, legacy_age_s, removed);
	if (strcmp(t, "/tmp") != 0) {
		int r2 = gc_dir("/tmp", prefix, legacy_age_s, removed);
		if (r == 0)
			r = r2;
	}
	return r;
}
