/* Shared helpers for the Check-based test binaries (one binary per module).
 * Check forks every test into its own process with a timeout (CK_DEFAULT_TIMEOUT). */
#ifndef CAE_TESTUTIL_H
#define CAE_TESTUTIL_H

#include <check.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "cae/runner.h"

/* CAE_TEST_ONLY=name[,name...]: only the tests of those names are added (to run one test of
 * a suite while working on it, or one that must not share the engine with others). Unset:
 * every test. */
static inline void tu_add_test(TCase *tc, const TTest *tf, int signal, int allowed_exit, int start,
			       int end)
{
	const char *only = getenv("CAE_TEST_ONLY");
	if (only && *only) {
		size_t n = strlen(tf->name);
		const char *p = only;
		bool named = false;
		while (!named && (p = strstr(p, tf->name))) {
			named = (p == only || p[-1] == ',') && (p[n] == '\0' || p[n] == ',');
			p += n;
		}
		if (!named)
			return;
	}
	_tcase_add_test(tc, tf, signal, allowed_exit, start, end);
}
#undef tcase_add_test
#define tcase_add_test(tc, tf) tu_add_test((tc), (tf), 0, 0, 0, 1)
#undef tcase_add_loop_test
#define tcase_add_loop_test(tc, tf, s, e) tu_add_test((tc), (tf), 0, 0, (s), (e))

/* As root, a local environment's workspace is a file system of its own mounted in the host's
 * mount namespace (src/backend/diskfs.h): what a test leaves prepared would stay mounted,
 * with its loop device, after the test. When the process that made temporary directories
 * exits, every mount below them is detached (its loop device then frees itself), and then
 * the directories are removed: a test leaves nothing in /tmp. */
#define TU_TEMPS 512
static char tu_temps[TU_TEMPS][4096];
static int tu_n_temps;
static pid_t tu_temps_pid;

static inline int tu_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		(void)rmdir(path);
	else
		(void)unlink(path);
	return 0;
}

static inline void tu_unmount_temps(void)
{
	if (getpid() != tu_temps_pid)
		return; /* a child that exits: the directories are its parent's */
	for (int pass = 0; pass < 8; pass++) {
		FILE *f = fopen("/proc/self/mountinfo", "r");
		if (!f)
			return;
		char line[8192], mp[4096];
		bool any = false;
		while (fgets(line, sizeof(line), f)) {
			if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1)
				continue;
			for (int i = 0; i < tu_n_temps; i++) {
				size_t n = strlen(tu_temps[i]);
				if (strncmp(mp, tu_temps[i], n) == 0 && mp[n] == '/')
					any |= umount2(mp, MNT_DETACH) == 0;
			}
		}
		fclose(f);
		if (!any)
			break;
	}
	/* never into a mount that could not be detached: it is not ours to empty */
	for (int i = 0; i < tu_n_temps; i++)
		(void)nftw(tu_temps[i], tu_remove_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

/* Makes a fresh temporary directory; the caller frees the string. */
static inline char *tu_mkdtemp(void)
{
	const char *base = getenv("TMPDIR");
	char tmpl[4096];
	snprintf(tmpl, sizeof(tmpl), "%s/cae-test-XXXXXX", base && *base ? base : "/tmp");
	char *d = mkdtemp(tmpl);
	ck_assert_ptr_nonnull(d);
	if (tu_temps_pid != getpid()) {
		tu_temps_pid = getpid();
		tu_n_temps = 0;
		atexit(tu_unmount_temps);
	}
	if (tu_n_temps < TU_TEMPS)
		snprintf(tu_temps[tu_n_temps++], sizeof(tu_temps[0]), "%s", d);
	return strdup(d);
}

/* How many lines of the file at path (a log, mostly) hold text. */
static inline int tu_lines_with(const char *path, const char *text)
{
	FILE *f = fopen(path, "r");
	ck_assert_msg(f != NULL, "cannot read %s", path);
	char line[16384];
	int n = 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, text) != NULL;
	fclose(f);
	return n;
}

/* Writes a file (creating it) relative to dir, aborting the test on failure. */
static inline void tu_write(const char *dir, const char *name, const char *content)
{
	char *p = cae__path_join(dir, name);
	FILE *f = fopen(p, "wb");
	ck_assert_msg(f != NULL, "cannot create %s", p);
	fwrite(content, 1, strlen(content), f);
	fclose(f);
	free(p);
}

/* A TCP port of the loopback that nothing listens on now (the kernel's choice), for a server
 * of a test's own: a port made of the pid could be another test's, or a connection's. */
static inline int tu_free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	ck_assert_msg(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
			  getsockname(fd, (struct sockaddr *)&a, &len) == 0,
		      "no free port on the loopback");
	close(fd);
	return ntohs(a.sin_port);
}

/* Runs a shell command line on the host (test fixtures); it must succeed. */
static inline void tu_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void tu_sh(const char *fmt, ...)
{
	char *script;
	va_list ap;
	va_start(ap, fmt);
	ck_assert_int_ge(vasprintf(&script, fmt, ap), 0);
	va_end(ap);
	const char *argv[] = {"sh", "-c", script, NULL};
	cae_run_spec spec = {.argv = argv, .timeout_ms = 120000, .cancel_fd = -1};
	cae_run_result r;
	cae_error err = {0};
	ck_assert_msg(cae_runner_run(&spec, &r, &err) == 0, "%s", err.message);
	ck_assert_msg(r.exit_code == 0, "%s failed: %s%s", script, r.out, r.err);
	cae_run_result_clear(&r);
	free(script);
}

/* Runs a suite (built by make_suite) and exits with its status. */
static inline int tu_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	/* a run narrowed to one case (CK_RUN_CASE, as meson.build splits long suites) that
	 * names none ran nothing: a failure, not a pass */
	int ran = srunner_ntests_run(sr);
	srunner_free(sr);
	if (ran == 0) {
		fprintf(stderr, "no test ran (CK_RUN_CASE=%s)\n",
			getenv("CK_RUN_CASE") ? getenv("CK_RUN_CASE") : "");
		return EXIT_FAILURE;
	}
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif
