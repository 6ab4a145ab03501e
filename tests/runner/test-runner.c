#include "base/macro.h"
#include "cae/runner.h"
#include "runner/capture.h"
#include "runner/proctree.h"
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

static int run_sh(const char *script, int64_t timeout_ms, cae_run_result *res)
{
	const char *argv[] = {"sh", "-c", script, NULL};
	cae_run_spec spec = {
	    .argv = argv, .timeout_ms = timeout_ms, .grace_ms = 200, .cancel_fd = -1};
	cae_error err;
	return cae_runner_run(&spec, res, &err);
}

static bool pid_alive(pid_t pid)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(p, "r");
	if (!f)
		return false;
	char line[512] = "";
	char *ok = fgets(line, sizeof(line), f);
	fclose(f);
	char *rp = ok ? strrchr(line, ')') : NULL;
	/* A zombie still listed would be a leak too: report any entry as alive. */
	return rp != NULL;
}

static size_t my_children(void)
{
	pid_t kids[64];
	return cae__proctree_descendants(getpid(), kids, 64);
}

START_TEST(echo_and_exit_codes)
{
	cae_run_result r;
	ck_assert_int_eq(run_sh("echo hello; echo oops >&2; exit 3", 0, &r), 0);
	ck_assert_str_eq(r.out, "hello\n");
	ck_assert_str_eq(r.err, "oops\n");
	ck_assert_int_eq(r.exit_code, 3);
	ck_assert(!r.timed_out && !r.out_truncated);
	cae_run_result_clear(&r);
	ck_assert_int_eq(run_sh("kill -9 $$", 0, &r), 0);
	ck_assert_int_eq(r.exit_code, 137);
	ck_assert_int_eq(r.term_signal, SIGKILL);
	cae_run_result_clear(&r);
	ck_assert_uint_eq(my_children(), 0);
}
END_TEST

START_TEST(direct_argv_and_not_found)
{
	const char *argv[] = {"printf", "%s|", "a b", "$HOME", NULL};
	cae_run_spec spec = {.argv = argv, .cancel_fd = -1};
	cae_run_result r;
	cae_error err;
	ck_assert_int_eq(cae_runner_run(&spec, &r, &err), 0);
	ck_assert_str_eq(r.out, "a b|$HOME|");
	cae_run_result_clear(&r);
	const char *nf[] = {"definitely-not-a-command-xyz", NULL};
	spec.argv = nf;
	ck_assert_int_eq(cae_runner_run(&spec, &r, &err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err.message, "definitely-not-a-command-xyz"));
	spec.argv = argv;
	spec.cwd = "/nonexistent-dir";
	ck_assert_int_eq(cae_runner_run(&spec, &r, &err), -ENOTDIR);
	spec.cwd = "/etc/passwd";
	ck_assert_int_eq(cae_runner_run(&spec, &r, &err), -ENOTDIR);
	spec.cwd = "/tmp";
	const char *pw[] = {"pwd", NULL};
	spec.argv = pw;
	ck_assert_int_eq(cae_runner_run(&spec, &r, &err), 0);
	ck_assert_str_eq(r.out, "/tmp\n");
	cae_run_result_clear(&r);
}
END_TEST

START_TEST(stdin_10mib_intact)
{
	size_t n = 10u * 1024 * 1024;
	char *data = malloc(n);
	for (size_t i = 0; i < n; i++)
		data[i] = (char)('a' + (i * 7 + i / 13) % 26);
	const char *argv[] = {"cat", NULL};
	cae_run_spec spec = {.argv = argv,
			     .stdin_data = data,
			     .stdin_len = n,
			     .has_stdin = true,
			     .max_stdout = n + 1,
			     .cancel_fd = -1};
	cae_run_result r;
	cae_error err;
	ck_assert_int_eq(cae_runner_run(&spec, &r, &err), 0);
	ck_assert_uint_eq(r.out_len, n);
	ck_assert(memcmp(r.out, data, n) == 0);
	ck_assert(!r.out_truncated);
	cae_run_result_clear(&r);
	/* A command that does not read its stdin must not hang us or kill us with SIGPIPE. */
	const char *t[] = {"true", NULL};
	spec.argv = t;
	ck_assert_int_eq(cae_runner_run(&spec, &r, &err), 0);
	ck_assert_int_eq(r.exit_code, 0);
	cae_run_result_clear(&r);
	free(data);
}
END_TEST

START_TEST(no_stdin_is_dev_null)
{
	cae_run_result r;
	ck_assert_int_eq(run_sh("cat; echo done", 5000, &r), 0);
	ck_assert_str_eq(r.out, "done\n");
	ck_assert(!r.timed_out);
	cae_run_result_clear(&r);
}
END_TEST

START_TEST(timeout_kills_tree_with_setsid_and_double_fork)
{
	cae_run_result r;
	/* setsid'd grandchild, a double-forked grandchild (its parent exits), and the shell
	 * itself sleeping: all must be gone after the timeout. */
	ck_assert_int_eq(run_sh("setsid sleep 1000 & echo $!; "
				"sh -c 'sleep 1000 & echo $!'; "
				"sleep 1000",
				500, &r),
			 0);
	ck_assert(r.timed_out);
	ck_assert_int_eq(r.exit_code, 128 + SIGTERM);
	int a = 0, b = 0;
	ck_assert_int_eq(sscanf(r.out, "%d\n%d", &a, &b), 2);
	ck_assert(!pid_alive(a));
	ck_assert(!pid_alive(b));
	ck_assert_uint_eq(my_children(), 0);
	cae_run_result_clear(&r);
}
END_TEST

START_TEST(no_orphan_after_normal_exit)
{
	cae_run_result r;
	/* The command returns at once but leaves a setsid'd daemon holding stdout open and a
	 * double-forked grandchild: the call still returns promptly and both are gone. */
	ck_assert_int_eq(
	    run_sh("setsid sleep 1000 & echo $!; sh -c 'sleep 1000 & echo $!'; exit 0", 0, &r), 0);
	ck_assert(!r.timed_out);
	ck_assert_int_eq(r.exit_code, 0);
	int a = 0, b = 0;
	ck_assert_int_eq(sscanf(r.out, "%d\n%d", &a, &b), 2);
	ck_assert(!pid_alive(a));
	ck_assert(!pid_alive(b));
	ck_assert_uint_eq(my_children(), 0);
	ck_assert_int_lt(r.duration_ms, 5000);
	cae_run_result_clear(&r);
}
END_TEST

START_TEST(sigterm_ignored_gets_sigkill)
{
	cae_run_result r;
	ck_assert_int_eq(
	    run_sh("trap '' TERM; echo started; while :; do sleep 0.05; done", 300, &r), 0);
	ck_assert(r.timed_out);
	ck_assert_str_eq(r.out, "started\n");
	ck_assert_int_eq(r.exit_code, 128 + SIGKILL);
	ck_assert_uint_eq(my_children(), 0);
	cae_run_result_clear(&r);
}
END_TEST

START_TEST(yes_for_10s_under_1mib_cap)
{
	struct rusage before, after;
	getrusage(RUSAGE_SELF, &before);
	const char *argv[] = {"yes", NULL};
	cae_run_spec spec = {.argv = argv,
			     .timeout_ms = 10000,
			     .grace_ms = 200,
			     .max_stdout = 1024 * 1024,
			     .cancel_fd = -1};
	cae_run_result r;
	cae_error err;
	ck_assert_int_eq(cae_runner_run(&spec, &r, &err), 0);
	getrusage(RUSAGE_SELF, &after);
	ck_assert(r.timed_out);
	ck_assert(r.out_truncated);
	ck_assert_uint_eq(r.out_len, 1024 * 1024);
	ck_assert_uint_gt(r.out_total, 100ull * 1024 * 1024);
	ck_assert_int_eq(strncmp(r.out, "y\ny\n", 4), 0);
	long growth_kib = after.ru_maxrss - before.ru_maxrss;
	ck_assert_msg(growth_kib < 8 * 1024, "peak RSS grew by %ld KiB", growth_kib);
	cae_run_result_clear(&r);
}
END_TEST

START_TEST(invalid_utf8_becomes_replacement)
{
	cae_run_result r;
	ck_assert_int_eq(run_sh("printf 'a\\377b\\303'; printf '\\351' >&2", 0, &r), 0);
	ck_assert_str_eq(r.out, "a\xef\xbf\xbd"
				"b\xef\xbf\xbd");
	ck_assert_str_eq(r.err, "\xef\xbf\xbd");
	cae_run_result_clear(&r);
	/* A cap that falls inside a multi-byte character cuts before it. */
	const char *argv[] = {"printf", "ab\xc3\xa9z", NULL};
	cae_run_spec spec = {.argv = argv, .max_stdout = 3, .cancel_fd = -1};
	cae_error err;
	ck_assert_int_eq(cae_runner_run(&spec, &r, &err), 0);
	ck_assert_str_eq(r.out, "ab");
	ck_assert(r.out_truncated);
	cae_run_result_clear(&r);
}
END_TEST

START_TEST(head_tail_keeps_both_ends)
{
	const char *argv[] = {"seq", "1", "100000", NULL};
	cae_run_spec spec = {
	    .argv = argv, .max_stdout = 1000, .truncate = CAE_TRUNCATE_HEAD_TAIL, .cancel_fd = -1};
	cae_run_result r;
	cae_error err;
	ck_assert_int_eq(cae_runner_run(&spec, &r, &err), 0);
	ck_assert(r.out_truncated);
	ck_assert_int_eq(strncmp(r.out, "1\n2\n3\n", 6), 0);
	ck_assert_ptr_nonnull(strstr(r.out, "bytes omitted ...]"));
	size_t l = strlen(r.out);
	ck_assert_str_eq(r.out + l - 7, "100000\n");
	cae_run_result_clear(&r);
}
END_TEST

START_TEST(capture_head_tail_unit)
{
	cae_capture c;
	cae__capture_init(&c, 10, CAE_TRUNCATE_HEAD_TAIL);
	cae__capture_add(&c, "abcdefgh", 8);
	size_t n;
	bool t;
	char *s = cae__capture_finish(&c, &n, &t);
	ck_assert_str_eq(s, "abcdefgh");
	ck_assert(!t);
	free(s);
	cae__capture_init(&c, 10, CAE_TRUNCATE_HEAD_TAIL);
	for (int i = 0; i < 100; i++)
		cae__capture_add(&c, "0123456789", 10);
	s = cae__capture_finish(&c, &n, &t);
	ck_assert(t);
	ck_assert_str_eq(s, "01234\n\n[... 990 bytes omitted ...]\n\n56789");
	free(s);
}
END_TEST

struct canceller {
	int fd;
};
static void *cancel_later(void *arg)
{
	struct canceller *c = arg;
	struct timespec ts = {0, 200 * 1000000L};
	nanosleep(&ts, NULL);
	ck_assert_int_eq(write(c->fd, "x", 1), 1);
	return NULL;
}

START_TEST(cancel_fd_kills)
{
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	struct canceller c = {p[1]};
	pthread_t th;
	pthread_create(&th, NULL, cancel_later, &c);
	const char *argv[] = {"sh", "-c", "echo before; sleep 1000", NULL};
	cae_run_spec spec = {.argv = argv, .cancel_fd = p[0]};
	cae_run_result r;
	cae_error err;
	ck_assert_int_eq(cae_runner_run(&spec, &r, &err), 0);
	pthread_join(th, NULL);
	ck_assert(r.cancelled);
	ck_assert(!r.timed_out);
	ck_assert_str_eq(r.out, "before\n");
	ck_assert_uint_eq(my_children(), 0);
	cae_run_result_clear(&r);
	close(p[0]);
	close(p[1]);
}
END_TEST

static void *run_in_thread(void *arg)
{
	cae_run_result *r = arg;
	run_sh("sleep 0.3; echo thread", 5000, r);
	return NULL;
}

START_TEST(concurrent_runs)
{
	pthread_t th[3];
	cae_run_result rs[3];
	for (int i = 0; i < 3; i++)
		pthread_create(&th[i], NULL, run_in_thread, &rs[i]);
	cae_run_result r;
	ck_assert_int_eq(run_sh("echo main", 0, &r), 0);
	ck_assert_str_eq(r.out, "main\n");
	cae_run_result_clear(&r);
	for (int i = 0; i < 3; i++) {
		pthread_join(th[i], NULL);
		ck_assert_str_eq(rs[i].out, "thread\n");
		ck_assert_int_eq(rs[i].exit_code, 0);
		cae_run_result_clear(&rs[i]);
	}
	ck_assert_uint_eq(my_children(), 0);
}
END_TEST

START_TEST(find_program)
{
	char *p = NULL;
	ck_assert_int_eq(cae_runner_find_program("sh", NULL, &p), 0);
	ck_assert_ptr_nonnull(strstr(p, "/sh"));
	free(p);
	const char *env[] = {"PATH=/nonexistent", NULL};
	ck_assert_int_eq(cae_runner_find_program("sh", env, &p), -ENOENT);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("runner");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, echo_and_exit_codes);
	tcase_add_test(tc, direct_argv_and_not_found);
	tcase_add_test(tc, stdin_10mib_intact);
	tcase_add_test(tc, no_stdin_is_dev_null);
	tcase_add_test(tc, timeout_kills_tree_with_setsid_and_double_fork);
	tcase_add_test(tc, no_orphan_after_normal_exit);
	tcase_add_test(tc, sigterm_ignored_gets_sigkill);
	tcase_add_test(tc, yes_for_10s_under_1mib_cap);
	tcase_add_test(tc, invalid_utf8_becomes_replacement);
	tcase_add_test(tc, head_tail_keeps_both_ends);
	tcase_add_test(tc, capture_head_tail_unit);
	tcase_add_test(tc, cancel_fd_kills);
	tcase_add_test(tc, concurrent_runs);
	tcase_add_test(tc, find_program);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(make_suite());
}
