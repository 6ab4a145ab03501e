/* The loopback git server of the clone tests (scripts/git-server.sh), as a Check unchecked
 * fixture: gs_setup makes repository py.git and serves it over git:// and authenticated
 * smart HTTP on 127.0.0.1; gs_teardown stops the server. The fixture runs in the parent
 * process (unchecked fixtures do), so its daemons outlive each forked test. */
#ifndef CAE_TESTS_GITSERVER_H
#define CAE_TESTS_GITSERVER_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#ifndef CAE_SOURCE_ROOT
#error "CAE_SOURCE_ROOT must name the source tree (for scripts/git-server.sh)"
#endif

#define GIT "git -c user.email=t@example.com -c user.name=t -c init.defaultBranch=main"

static char git_root[512];
static char git_http[256];   /* http://127.0.0.1:P/ (basic auth) */
static char git_daemon[256]; /* git://127.0.0.1:P/ */
static char git_token[128];

/* Runs a shell command in the fixture (the parent process). Not through cae_runner_run:
 * the runner makes its caller a subreaper and kills orphans, and the git server's daemons
 * must outlive the script that starts them. */
static void shf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void shf(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	int st = system(cmd);
	ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s failed (%d)", cmd, st);
}

static void gs_copy_value(char *dst, size_t size, const char *text, const char *key)
{
	const char *p = strstr(text, key);
	ck_assert_msg(p != NULL, "git-server.sh printed no %s: %s", key, text);
	p += strlen(key);
	size_t n = strcspn(p, "\n");
	ck_assert(n < size);
	memcpy(dst, p, n);
	dst[n] = '\0';
}

/* Repository py.git: a Python project with a passing test on main (20 commits, then 40
 * more), and a branch `feature` off main's 20th commit with 40 commits adding f.txt. */
static void gs_setup(void)
{
	char *work = tu_mkdtemp();
	char *root = tu_mkdtemp();
	snprintf(git_root, sizeof(git_root), "%s", root);
	shf("set -e; cd %s && " GIT " init -q && "
	    "printf 'def add(a, b):\\n    return a + b\\n' > calc.py && "
	    "printf 'from calc import add\\n\\n\\ndef test_add():\\n    assert add(1, 2) == 3\\n' "
	    "> test_calc.py && " GIT " add . && " GIT " commit -qm init && "
	    "for i in $(seq 1 20); do echo c$i >> a.txt && " GIT " add . && " GIT
	    " commit -qm c$i; "
	    "done && " GIT
	    " checkout -qb feature && for i in $(seq 1 40); do echo f$i >> f.txt && " GIT
	    " add . && " GIT " commit -qm f$i; done && " GIT " checkout -q main && "
	    "for i in $(seq 1 40); do echo m$i >> a.txt && " GIT " commit -qam m$i; done && "
	    "git clone -q --bare . %s/py.git && rm -rf %s",
	    work, root, work);
	snprintf(git_token, sizeof(git_token), "tok%08x%08x%08x", (unsigned)random(),
		 (unsigned)getpid(), (unsigned)time(NULL));
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "CAE_TEST_GIT_TOKEN=%s %s/scripts/git-server.sh start %s",
		 git_token, CAE_SOURCE_ROOT, git_root);
	FILE *f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	char out[4096];
	size_t n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = '\0';
	int st = pclose(f);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "git-server.sh start failed: %s", out);
	gs_copy_value(git_http, sizeof(git_http), out, "GIT_HTTP_URL=");
	gs_copy_value(git_daemon, sizeof(git_daemon), out, "GIT_DAEMON_URL=");
	char tok[128];
	gs_copy_value(tok, sizeof(tok), out, "GIT_HTTP_TOKEN=");
	ck_assert_str_eq(tok, git_token);
	free(work);
	free(root);
}

static void gs_teardown(void)
{
	if (!git_root[0])
		return;
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "%s/scripts/git-server.sh stop %s; rm -rf %s", CAE_SOURCE_ROOT,
		 git_root, git_root);
	if (system(cmd) == -1)
		fprintf(stderr, "git-server.sh stop failed\n");
	git_root[0] = '\0';
}

#endif
