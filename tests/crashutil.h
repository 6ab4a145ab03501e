/* Helpers for the crash-consistency tests (SIGKILL at numbered kill points, base/txn.h):
 * running a piece of work in a child killed at the n-th kill point, and the state of a
 * workspace as one string of per-file content hashes. */
#ifndef CAE_CRASHUTIL_H
#define CAE_CRASHUTIL_H

#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/fs.h"
#include "base/txn.h"

static inline uint64_t cu_hash(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ULL;
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211ULL;
	}
	return h;
}

/* Whether cu_state lists directories too (every one old or new, like the files). */
static bool cu_with_dirs = true;

static int cu_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends "path hash\n" for every regular file below dir (prefix: its path), "path -> target"
 * for symbolic links, and counts the entries whose name starts with ".cae-" in *temps. .git
 * is skipped. Entries in name order. */
static inline void cu_walk(const char *dir, const char *prefix, cae_buf *out, int *temps)
{
	DIR *d = opendir(dir);
	ck_assert_msg(d != NULL, "opendir %s", dir);
	char **names = NULL;
	size_t n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    !strcmp(de->d_name, ".git"))
			continue;
		names = realloc(names, (n + 1) * sizeof(char *));
		names[n++] = strdup(de->d_name);
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof(char *), cu_cmp);
	for (size_t i = 0; i < n; i++) {
		char *p = cae__path_join(dir, names[i]);
		char *rel = *prefix ? cae__path_join(prefix, names[i]) : strdup(names[i]);
		if (strncmp(names[i], ".cae-", 5) == 0)
			(*temps)++;
		struct stat st;
		ck_assert_int_eq(lstat(p, &st), 0);
		if (S_ISDIR(st.st_mode)) {
			if (cu_with_dirs)
				ck_assert_int_eq(cae__buf_printf(out, "%s/ %04o\n", rel,
								 (unsigned)(st.st_mode & 07777)),
						 0);
			cu_walk(p, rel, out, temps);
		} else if (S_ISLNK(st.st_mode)) {
			char t[4096];
			ssize_t k = readlink(p, t, sizeof(t) - 1);
			ck_assert_int_ge(k, 0);
			t[k] = '\0';
			ck_assert_int_eq(cae__buf_printf(out, "%s -> %s\n", rel, t), 0);
		} else {
			char *data = NULL;
			size_t len = 0;
			ck_assert_int_eq(cae__read_file(AT_FDCWD, p, (size_t)1 << 30, &data, &len),
					 0);
			ck_assert_int_eq(cae__buf_printf(out, "%s %04o %016llx\n", rel,
							 (unsigned)(st.st_mode & 07777),
							 (unsigned long long)cu_hash(data, len)),
					 0);
			free(data);
		}
		free(p);
		free(rel);
		free(names[i]);
	}
	free(names);
}

/* The state of the tree at root (new string); *temps: entries named .cae-*. */
static inline char *cu_state(const char *root, int *temps)
{
	cae_buf b;
	cae__buf_init(&b, (size_t)64 << 20);
	*temps = 0;
	cu_walk(root, "", &b, temps);
	return b.data ? cae__buf_steal(&b, NULL) : strdup("");
}

/* Journals (any workspace) left in the journal directory beside root. */
static inline int cu_journals(const char *root)
{
	char *jd = cae__path_join(root, "../" CAE_JOURNAL_DIR);
	DIR *d = opendir(jd);
	free(jd);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

/* Runs fn(arg) in a child that raises SIGKILL at its n-th kill point. Returns 1 when the
 * child was killed there, 0 when it finished first (fn returned 0). */
static inline int cu_run_killed(long n, int (*fn)(void *), void *arg)
{
	fflush(NULL);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		cae__txn_test_kill_at(n);
		_exit(fn(arg) == 0 ? 0 : 3);
	}
	int status = 0;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status)) {
		ck_assert_int_eq(WTERMSIG(status), SIGKILL);
		return 1;
	}
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	return 0;
}

#endif
