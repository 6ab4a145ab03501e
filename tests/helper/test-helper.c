/* cae-helper: the wire format (both directions, malformed input) and the real program
 * started from the build tree (CAE_HELPER, set by the test setup): runner semantics through
 * the channel, cancellation, concurrency, the helper's own end. */
#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/helper.h"
#include "helper/proto.h"
#include "runner/proctree.h"
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

static bool pid_alive(pid_t pid)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(p, "r");
	if (!f)
		return false;
	fclose(f);
	return true; /* a zombie still listed is a leak too */
}

static char proc_state(pid_t pid)
{
	char p[64], line[512] = "";
	snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(p, "r");
	if (!f)
		return 0;
	char *ok = fgets(line, sizeof(line), f);
	fclose(f);
	char *rp = ok ? strrchr(line, ')') : NULL;
	return rp && rp[1] == ' ' ? rp[2] : 0;
}

static size_t my_children(void)
{
	pid_t kids[64];
	return cae__proctree_descendants(getpid(), kids, 64);
}

static size_t children_of(pid_t pid)
{
	pid_t kids[64];
	return cae__proctree_descendants(pid, kids, 64);
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static cae_helper *start(void)
{
	const char *path = getenv("CAE_HELPER");
	ck_assert_msg(path && *path, "CAE_HELPER is not set (run through meson test)");
	const char *argv[] = {path, NULL};
	cae_helper *h = NULL;
	cae_error err = {0};
	int r = cae_helper_start(argv, NULL, 10000, &h, &err);
	ck_assert_msg(r == 0, "start: %s", err.message);
	return h;
}

static int run_sh(cae_helper *h, const char *script, int64_t timeout_ms, cae_run_result *res)
{
	const char *argv[] = {"sh", "-c", script, NULL};
	cae_run_spec spec = {
	    .argv = argv, .timeout_ms = timeout_ms, .grace_ms = 200, .cancel_fd = -1};
	cae_error err;
	return cae_helper_run(h, &spec, res, &err);
}

/* ---- wire format ---- */

START_TEST(request_round_trip)
{
	const char *argv[] = {"printf", "%s", "a b", "", NULL};
	const char *envp[] = {"A=1", "PATH=/bin", NULL};
	const char stdin_data[] = "in\0put";
	cae_run_spec spec = {.argv = argv,
			     .envp = envp,
			     .cwd = "/tmp",
			     .stdin_data = stdin_data,
			     .stdin_len = 6,
			     .has_stdin = true,
			     .timeout_ms = 1234,
			     .grace_ms = 5,
			     .drain_ms = 6,
			     .max_stdout = 77,
			     .max_stderr = 88,
			     .truncate = CAE_TRUNCATE_HEAD_TAIL,
			     .cancel_fd = -1};
	cae_buf b;
	cae__buf_init(&b, 1 << 20);
	ck_assert_int_eq(cae__helper_encode_request(&spec, NULL, &b), 0);
	ck_assert_uint_eq(cae__helper_frame_length((const unsigned char *)b.data), b.len - 4);
	cae_helper_request q;
	cae_error err = {0};
	ck_assert_int_eq(cae__helper_decode_request(b.data + 4, b.len - 4, &q, &err), 0);
	ck_assert_str_eq(q.spec.argv[0], "printf");
	ck_assert_str_eq(q.spec.argv[2], "a b");
	ck_assert_str_eq(q.spec.argv[3], "");
	ck_assert_ptr_null(q.spec.argv[4]);
	ck_assert_str_eq(q.spec.envp[1], "PATH=/bin");
	ck_assert_ptr_null(q.spec.envp[2]);
	ck_assert_str_eq(q.spec.cwd, "/tmp");
	ck_assert(q.spec.has_stdin);
	ck_assert_uint_eq(q.spec.stdin_len, 6);
	ck_assert_mem_eq(q.spec.stdin_data, "in\0put", 6);
	ck_assert_int_eq(q.spec.timeout_ms, 1234);
	ck_assert_int_eq(q.spec.grace_ms, 5);
	ck_assert_int_eq(q.spec.drain_ms, 6);
	ck_assert_uint_eq(q.spec.max_stdout, 77);
	ck_assert_uint_eq(q.spec.max_stderr, 88);
	ck_assert_int_eq(q.spec.truncate, CAE_TRUNCATE_HEAD_TAIL);
	ck_assert_int_eq(q.spec.cancel_fd, -1);
	cae__helper_request_clear(&q);

	/* An empty environment stays empty (not "inherit"); no envp inherits. */
	const char *empty[] = {NULL};
	cae_run_spec s2 = {.argv = argv, .envp = empty, .cancel_fd = -1};
	cae__buf_clear(&b);
	ck_assert_int_eq(cae__helper_encode_request(&s2, NULL, &b), 0);
	ck_assert_int_eq(cae__helper_decode_request(b.data + 4, b.len - 4, &q, &err), 0);
	ck_assert_ptr_nonnull(q.spec.envp);
	ck_assert_ptr_null(q.spec.envp[0]);
	ck_assert(!q.spec.has_stdin);
	cae__helper_request_clear(&q);
	s2.envp = NULL;
	cae__buf_clear(&b);
	ck_assert_int_eq(cae__helper_encode_request(&s2, NULL, &b), 0);
	ck_assert_int_eq(cae__helper_decode_request(b.data + 4, b.len - 4, &q, &err), 0);
	ck_assert_ptr_null(q.spec.envp);
	cae__helper_request_clear(&q);
	cae__buf_clear(&b);
}
END_TEST

START_TEST(response_round_trip)
{
	cae_run_result res = {.exit_code = 130,
			      .term_signal = 2,
			      .timed_out = true,
			      .out = (char *)"out",
			      .out_len = 3,
			      .out_truncated = true,
			      .out_total = 1ull << 40,
			      .err = (char *)"",
			      .err_len = 0,
			      .err_total = 9,
			      .duration_us = 4567};
	cae_buf b;
	cae__buf_init(&b, 1 << 20);
	ck_assert_int_eq(cae__helper_encode_response(0, NULL, &res, &b), 0);
	cae_run_result got;
	int status = 1;
	cae_error err = {0};
	ck_assert_int_eq(cae__helper_decode_response(b.data + 4, b.len - 4, &status, &got, &err),
			 0);
	ck_assert_int_eq(status, 0);
	ck_assert_int_eq(got.exit_code, 130);
	ck_assert_int_eq(got.term_signal, 2);
	ck_assert(got.timed_out && !got.cancelled && got.out_truncated && !got.err_truncated);
	ck_assert_str_eq(got.out, "out");
	ck_assert_str_eq(got.err, "");
	ck_assert_uint_eq(got.out_total, 1ull << 40);
	ck_assert_uint_eq(got.err_total, 9);
	ck_assert_int_eq(got.duration_us, 4567);
	ck_assert_int_eq(got.duration_ms, 4);
	cae_run_result_clear(&got);

	cae__buf_clear(&b);
	ck_assert_int_eq(cae__helper_encode_response(-ENOENT, "command not found: nope", NULL, &b),
			 0);
	ck_assert_int_eq(cae__helper_decode_response(b.data + 4, b.len - 4, &status, &got, &err),
			 0);
	ck_assert_int_eq(status, -ENOENT);
	ck_assert_int_eq(err.code, -ENOENT);
	ck_assert_str_eq(err.message, "command not found: nope");
	ck_assert_ptr_null(got.out);
	cae__buf_clear(&b);
}
END_TEST

/* Builds a body from (tag, bytes) pieces. */
static size_t body(char *out, char type, const char *fields, size_t flen)
{
	out[0] = type;
	memcpy(out + 1, fields, flen);
	return flen + 1;
}

START_TEST(malformed_messages_refused)
{
	char b[256];
	cae_helper_request q;
	cae_run_result res;
	int status;
	cae_error err;
	/* wrong type byte */
	size_t n = body(b, 'R', "\x01\x01\x00\x00\x00x", 6);
	ck_assert_int_eq(cae__helper_decode_request(b, n, &q, &err), -EINVAL);
	/* empty body */
	ck_assert_int_eq(cae__helper_decode_request(b, 0, &q, &err), -EINVAL);
	/* field header cut short */
	n = body(b, 'Q', "\x01\x01\x00", 3);
	ck_assert_int_eq(cae__helper_decode_request(b, n, &q, &err), -EINVAL);
	/* field length past the end */
	n = body(b, 'Q', "\x01\xff\x00\x00\x00x", 6);
	ck_assert_int_eq(cae__helper_decode_request(b, n, &q, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "overruns"));
	/* NUL inside an argument */
	n = body(b, 'Q',
		 "\x01\x03\x00\x00\x00"
		 "a\0b",
		 8);
	ck_assert_int_eq(cae__helper_decode_request(b, n, &q, &err), -EINVAL);
	/* no command */
	n = body(b, 'Q', "\x04\x01\x00\x00\x00/", 6);
	ck_assert_int_eq(cae__helper_decode_request(b, n, &q, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.message, "no command"));
	/* an integer of the wrong size, a bad truncate mode */
	n = body(b, 'Q', "\x01\x01\x00\x00\x00x\x06\x02\x00\x00\x00\x01\x02", 13);
	ck_assert_int_eq(cae__helper_decode_request(b, n, &q, &err), -EINVAL);
	n = body(b, 'Q', "\x01\x01\x00\x00\x00x\x0b\x08\x00\x00\x00\x07\0\0\0\0\0\0\0", 19);
	ck_assert_int_eq(cae__helper_decode_request(b, n, &q, &err), -EINVAL);
	/* unknown tags are skipped */
	n = body(b, 'Q', "\x01\x01\x00\x00\x00x\x63\x02\x00\x00\x00zz", 13);
	ck_assert_int_eq(cae__helper_decode_request(b, n, &q, &err), 0);
	ck_assert_str_eq(q.spec.argv[0], "x");
	cae__helper_request_clear(&q);

	/* responses: no status; an exit code out of range; invalid UTF-8 made valid */
	n = body(b, 'R', "\x06\x01\x00\x00\x00x", 6);
	ck_assert_int_eq(cae__helper_decode_response(b, n, &status, &res, &err), -EINVAL);
	n = body(b, 'R',
		 "\x01\x08\x00\x00\x00\0\0\0\0\0\0\0\0\x03\x08\x00\x00\x00\xff\xff\0\0\0\0\0\0",
		 26);
	ck_assert_int_eq(cae__helper_decode_response(b, n, &status, &res, &err), -EINVAL);
	n = body(b, 'R',
		 "\x01\x08\x00\x00\x00\0\0\0\0\0\0\0\0\x06\x03\x00\x00\x00"
		 "a\xff"
		 "z",
		 21);
	ck_assert_int_eq(cae__helper_decode_response(b, n, &status, &res, &err), 0);
	ck_assert_int_eq(status, 0);
	ck_assert_str_eq(res.out, "a\xef\xbf\xbdz");
	ck_assert_str_eq(res.err, "");
	cae_run_result_clear(&res);
	/* a positive status is not a thing */
	n = body(b, 'R', "\x01\x08\x00\x00\x00\x05\0\0\0\0\0\0\0", 13);
	ck_assert_int_eq(cae__helper_decode_response(b, n, &status, &res, &err), -EINVAL);
}
END_TEST

/* ---- the program ---- */

START_TEST(runs_commands_like_the_runner)
{
	cae_helper *h = start();
	cae_run_result r;
	ck_assert_int_eq(run_sh(h, "echo hello; echo oops >&2; exit 3", 0, &r), 0);
	ck_assert_str_eq(r.out, "hello\n");
	ck_assert_str_eq(r.err, "oops\n");
	ck_assert_int_eq(r.exit_code, 3);
	cae_run_result_clear(&r);
	ck_assert_int_eq(run_sh(h, "kill -9 $$", 0, &r), 0);
	ck_assert_int_eq(r.exit_code, 137);
	ck_assert_int_eq(r.term_signal, SIGKILL);
	cae_run_result_clear(&r);

	/* cwd, environment, stdin from /dev/null, caps with head_tail */
	char *dir = tu_mkdtemp();
	const char *argv[] = {"sh", "-c", "pwd; echo $ONLY; cat; printf 0123456789 >&2", NULL};
	const char *envp[] = {"ONLY=this", "PATH=/usr/bin:/bin", NULL};
	cae_run_spec spec = {.argv = argv,
			     .envp = envp,
			     .cwd = dir,
			     .max_stderr = 6,
			     .truncate = CAE_TRUNCATE_HEAD_TAIL,
			     .cancel_fd = -1};
	cae_error err;
	ck_assert_int_eq(cae_helper_run(h, &spec, &r, &err), 0);
	char want[4200];
	snprintf(want, sizeof(want), "%s\nthis\n", dir);
	ck_assert_str_eq(r.out, want);
	ck_assert(r.err_truncated);
	ck_assert_uint_eq(r.err_total, 10);
	ck_assert_ptr_nonnull(strstr(r.err, "012"));
	ck_assert_ptr_nonnull(strstr(r.err, "789"));
	cae_run_result_clear(&r);

	/* the runner's errors come back with their codes and messages */
	const char *nope[] = {"no-such-program-cae", NULL};
	cae_run_spec s2 = {.argv = nope, .cancel_fd = -1};
	ck_assert_int_eq(cae_helper_run(h, &s2, &r, &err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err.message, "no-such-program-cae"));
	const char *t[] = {"true", NULL};
	cae_run_spec s3 = {.argv = t, .cwd = "/nonexistent-cae", .cancel_fd = -1};
	ck_assert_int_eq(cae_helper_run(h, &s3, &r, &err), -ENOTDIR);
	ck_assert(cae_helper_alive(h));
	cae_helper_stop(h);
	ck_assert_uint_eq(my_children(), 0);
	cae__rm_rf(dir);
	free(dir);
}
END_TEST

START_TEST(stdin_10mib_and_large_output_intact)
{
	cae_helper *h = start();
	size_t n = 10u << 20;
	char *in = malloc(n);
	for (size_t i = 0; i < n; i++)
		in[i] = (char)('a' + (i * 7919) % 26);
	const char *argv[] = {"cat", NULL};
	cae_run_spec spec = {.argv = argv,
			     .stdin_data = in,
			     .stdin_len = n,
			     .has_stdin = true,
			     .max_stdout = n + 1,
			     .cancel_fd = -1};
	cae_run_result r;
	cae_error err;
	ck_assert_int_eq(cae_helper_run(h, &spec, &r, &err), 0);
	ck_assert_uint_eq(r.out_len, n);
	ck_assert(memcmp(r.out, in, n) == 0);
	ck_assert(!r.out_truncated);
	cae_run_result_clear(&r);
	free(in);
	/* past the cap: kept bytes bounded, the total counted */
	ck_assert_int_eq(run_sh(h, "head -c 5000000 /dev/zero | tr '\\0' x", 0, &r), 0);
	ck_assert_uint_eq(r.out_len, CAE_RUNNER_DEFAULT_MAX_OUTPUT);
	ck_assert(r.out_truncated);
	ck_assert_uint_eq(r.out_total, 5000000);
	cae_run_result_clear(&r);
	/* invalid UTF-8 in output arrives as U+FFFD */
	ck_assert_int_eq(run_sh(h, "printf 'a\\377b'", 0, &r), 0);
	ck_assert_str_eq(r.out, "a\xef\xbf\xbd"
				"b");
	cae_run_result_clear(&r);
	cae_helper_stop(h);
}
END_TEST

START_TEST(timeout_kills_tree_inside_helper)
{
	cae_helper *h = start();
	cae_run_result r;
	ck_assert_int_eq(run_sh(h,
				"setsid sleep 1000 & echo $!; "
				"sh -c 'sleep 1000 & echo $!'; sleep 1000",
				500, &r),
			 0);
	ck_assert(r.timed_out);
	ck_assert_int_eq(r.exit_code, 128 + SIGTERM);
	int a = 0, b = 0;
	ck_assert_int_eq(sscanf(r.out, "%d\n%d", &a, &b), 2);
	ck_assert(!pid_alive(a));
	ck_assert(!pid_alive(b));
	ck_assert_uint_eq(children_of(cae_helper_pid(h)), 0);
	cae_run_result_clear(&r);
	/* after a normal exit too */
	ck_assert_int_eq(
	    run_sh(h, "setsid sleep 1000 & echo $!; sh -c 'sleep 1000 & echo $!'", 0, &r), 0);
	ck_assert_int_eq(sscanf(r.out, "%d\n%d", &a, &b), 2);
	ck_assert(!pid_alive(a));
	ck_assert(!pid_alive(b));
	ck_assert_uint_eq(children_of(cae_helper_pid(h)), 0);
	cae_run_result_clear(&r);
	cae_helper_stop(h);
	ck_assert_uint_eq(my_children(), 0);
}
END_TEST

struct canceller {
	int fd;
};

static void *cancel_later(void *arg)
{
	struct canceller *c = arg;
	sleep_ms(300);
	ck_assert_int_eq(write(c->fd, "x", 1), 1);
	return NULL;
}

START_TEST(cancel_reaches_the_helper)
{
	cae_helper *h = start();
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	struct canceller c = {p[1]};
	pthread_t th;
	pthread_create(&th, NULL, cancel_later, &c);
	const char *argv[] = {"sh", "-c", "echo before; echo $$; sleep 1000", NULL};
	cae_run_spec spec = {.argv = argv, .cancel_fd = p[0]};
	cae_run_result r;
	cae_error err;
	ck_assert_int_eq(cae_helper_run(h, &spec, &r, &err), 0);
	pthread_join(th, NULL);
	ck_assert(r.cancelled);
	ck_assert(!r.timed_out);
	ck_assert_ptr_nonnull(strstr(r.out, "before\n"));
	int sh = 0;
	ck_assert_int_eq(sscanf(r.out, "before\n%d", &sh), 1);
	ck_assert(!pid_alive(sh));
	ck_assert_int_lt(r.duration_ms, 5000);
	cae_run_result_clear(&r);
	close(p[0]);
	close(p[1]);
	ck_assert(cae_helper_alive(h));
	cae_helper_stop(h);
}
END_TEST

struct par {
	cae_helper *h;
	const char *dir;
	int i;
	cae_run_result r;
	int rc;
};

/* Each command checks in and waits for all four: run one after another, the first would give
 * up ("alone") instead of printing its line. */
static void *run_par(void *arg)
{
	struct par *p = arg;
	char script[4400];
	snprintf(script, sizeof(script),
		 "touch '%s/%d'; n=0; while [ $(ls '%s' | wc -l) -lt 4 ]; do sleep 0.05; "
		 "n=$((n+1)); [ $n -gt 600 ] && { echo alone; exit 1; }; done; echo thread %d",
		 p->dir, p->i, p->dir, p->i);
	p->rc = run_sh(p->h, script, 60000, &p->r);
	return NULL;
}

START_TEST(concurrent_commands)
{
	cae_helper *h = start();
	char *dir = tu_mkdtemp();
	pthread_t th[4];
	struct par ps[4];
	for (int i = 0; i < 4; i++) {
		ps[i] = (struct par){.h = h, .dir = dir, .i = i};
		pthread_create(&th[i], NULL, run_par, &ps[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		char want[32];
		snprintf(want, sizeof(want), "thread %d\n", i);
		ck_assert_int_eq(ps[i].rc, 0);
		ck_assert_str_eq(ps[i].r.out, want);
		cae_run_result_clear(&ps[i].r);
	}
	cae_helper_stop(h);
	cae__rm_rf(dir);
	free(dir);
}
END_TEST

START_TEST(survives_the_runners_orphan_sweep)
{
	cae_helper *h = start();
	/* A command run here ends with a sweep of this process's unknown children: the
	 * helper is registered and must not be taken for an orphan. */
	const char *argv[] = {"true", NULL};
	cae_run_spec spec = {.argv = argv, .cancel_fd = -1};
	cae_run_result r;
	cae_error err;
	ck_assert_int_eq(cae_runner_run(&spec, &r, &err), 0);
	cae_run_result_clear(&r);
	ck_assert(pid_alive(cae_helper_pid(h)));
	ck_assert_int_eq(run_sh(h, "echo still", 0, &r), 0);
	ck_assert_str_eq(r.out, "still\n");
	cae_run_result_clear(&r);
	cae_helper_stop(h);
	ck_assert_uint_eq(my_children(), 0);
}
END_TEST

START_TEST(helper_death_is_reported)
{
	cae_helper *h = start();
	cae_run_result r;
	/* killed between commands: the next one is not sent */
	kill(cae_helper_pid(h), SIGKILL);
	for (int i = 0; i < 200 && proc_state(cae_helper_pid(h)) != 'Z'; i++)
		sleep_ms(5);
	cae_error err;
	ck_assert_int_eq(run_sh(h, "echo x", 0, &r), -EPIPE);
	ck_assert(!cae_helper_alive(h));
	ck_assert_int_eq(run_sh(h, "echo x", 0, &r), -EPIPE);
	cae_helper_stop(h);
	ck_assert_uint_eq(my_children(), 0);

	/* killed during a command */
	h = start();
	const char *argv[] = {"sh", "-c", "kill -9 $PPID; sleep 5", NULL};
	cae_run_spec spec = {.argv = argv, .timeout_ms = 10000, .cancel_fd = -1};
	ck_assert_int_eq(cae_helper_run(h, &spec, &r, &err), -ECONNRESET);
	ck_assert(!cae_helper_alive(h));
	cae_helper_stop(h);
	ck_assert_uint_eq(my_children(), 0);
}
END_TEST

START_TEST(start_failures_leave_nothing)
{
	cae_helper *h = NULL;
	cae_error err;
	const char *t[] = {"/bin/true", NULL};
	ck_assert_int_eq(cae_helper_start(t, NULL, 5000, &h, &err), -ECHILD);
	ck_assert_ptr_nonnull(strstr(err.message, "did not start"));
	const char *other[] = {"/bin/sh", "-c", "printf 'hello there' >&0; sleep 5", NULL};
	ck_assert_int_eq(cae_helper_start(other, NULL, 5000, &h, &err), -EPROTO);
	const char *silent[] = {"/bin/sleep", "100", NULL};
	ck_assert_int_eq(cae_helper_start(silent, NULL, 300, &h, &err), -ETIMEDOUT);
	const char *none[] = {"/nonexistent/cae-helper", NULL};
	ck_assert_int_eq(cae_helper_start(none, NULL, 300, &h, &err), -ENOENT);
	ck_assert_ptr_null(h);
	ck_assert_uint_eq(my_children(), 0);
}
END_TEST

START_TEST(end_of_channel_kills_commands)
{
	/* The manager side by hand: send one command, then close the channel while it runs. */
	const char *path = getenv("CAE_HELPER");
	ck_assert_ptr_nonnull(path);
	int ctl[2], rq[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl), 0);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, rq), 0);
	const char *argv[] = {path, NULL};
	pid_t pid;
	cae_error err;
	ck_assert_int_eq(cae_runner_service_start(argv, NULL, ctl[1], &pid, &err), 0);
	close(ctl[1]);
	char hello[64] = {0};
	ck_assert_int_gt(recv(ctl[0], hello, sizeof(hello) - 1, 0), 0);
	ck_assert_str_eq(hello, "cae-helper 1");

	ck_assert_int_eq(cae__helper_send_fd(ctl[0], rq[1], CAE_HELPER_FD_COMMAND), 0);
	close(rq[1]);

	char *dir = tu_mkdtemp();
	char *pidfile = cae__path_join(dir, "pid");
	char script[4200];
	snprintf(script, sizeof(script), "echo $$ > %s.tmp; mv %s.tmp %s; exec sleep 1000", pidfile,
		 pidfile, pidfile);
	const char *cmd[] = {"sh", "-c", script, NULL};
	cae_run_spec spec = {.argv = cmd, .cancel_fd = -1};
	cae_buf b;
	cae__buf_init(&b, 1 << 20);
	ck_assert_int_eq(cae__helper_encode_request(&spec, NULL, &b), 0);
	ck_assert_int_eq(write(rq[0], b.data, b.len), (ssize_t)b.len);
	cae__buf_clear(&b);
	FILE *f = NULL;
	for (int i = 0; i < 1000 && !(f = fopen(pidfile, "r")); i++)
		sleep_ms(5);
	ck_assert_ptr_nonnull(f);
	int sleeper = 0;
	ck_assert_int_eq(fscanf(f, "%d", &sleeper), 1);
	fclose(f);
	ck_assert(pid_alive(sleeper));

	close(ctl[0]); /* the manager is gone */
	int st = cae_runner_service_stop(pid, 5000);
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 0);
	for (int i = 0; i < 200 && pid_alive(sleeper); i++)
		sleep_ms(5);
	ck_assert(!pid_alive(sleeper));
	close(rq[0]);
	ck_assert_uint_eq(my_children(), 0);
	cae__rm_rf(dir);
	free(dir);
	free(pidfile);
}
END_TEST

START_TEST(max_idle_ends_the_helper)
{
	const char *path = getenv("CAE_HELPER");
	ck_assert_ptr_nonnull(path);
	const char *argv[] = {path, "--max-idle", "1", NULL};
	cae_helper *h = NULL;
	cae_error err;
	ck_assert_int_eq(cae_helper_start(argv, NULL, 5000, &h, &err), 0);
	cae_run_result r;
	ck_assert_int_eq(run_sh(h, "sleep 1.3; echo done", 0, &r), 0); /* running is not idle */
	ck_assert_str_eq(r.out, "done\n");
	cae_run_result_clear(&r);
	for (int i = 0; i < 600 && proc_state(cae_helper_pid(h)) != 'Z'; i++)
		sleep_ms(5);
	ck_assert_int_eq(proc_state(cae_helper_pid(h)), 'Z');
	ck_assert_int_eq(run_sh(h, "echo x", 0, &r), -EPIPE);
	cae_helper_stop(h);
	ck_assert_uint_eq(my_children(), 0);
}
END_TEST

START_TEST(find_uses_the_environment)
{
	char *p = NULL;
	ck_assert_int_eq(cae_helper_find(&p), 0);
	char *real = realpath(getenv("CAE_HELPER"), NULL);
	ck_assert_str_eq(p, real);
	free(real);
	free(p);
	/* relative paths come back absolute */
	char *saved_cwd = getcwd(NULL, 0);
	char *dir = strdup(getenv("CAE_HELPER"));
	*strrchr(dir, '/') = '\0';
	ck_assert_int_eq(chdir(dir), 0);
	char *saved0 = strdup(getenv("CAE_HELPER"));
	setenv("CAE_HELPER", "./cae-helper", 1);
	ck_assert_int_eq(cae_helper_find(&p), 0);
	ck_assert_int_eq(p[0], '/');
	free(p);
	setenv("CAE_HELPER", saved0, 1);
	ck_assert_int_eq(chdir(saved_cwd), 0);
	free(saved0);
	free(saved_cwd);
	free(dir);
	char *saved = strdup(getenv("CAE_HELPER"));
	setenv("CAE_HELPER", "/nonexistent/cae-helper", 1);
	ck_assert_int_eq(cae_helper_find(&p), -ENOENT);
	setenv("CAE_HELPER", saved, 1);
	free(saved);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("helper");
	TCase *tc = tcase_create("proto");
	tcase_add_test(tc, request_round_trip);
	tcase_add_test(tc, response_round_trip);
	tcase_add_test(tc, malformed_messages_refused);
	suite_add_tcase(s, tc);
	tc = tcase_create("program");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, runs_commands_like_the_runner);
	tcase_add_test(tc, stdin_10mib_and_large_output_intact);
	tcase_add_test(tc, timeout_kills_tree_inside_helper);
	tcase_add_test(tc, cancel_reaches_the_helper);
	tcase_add_test(tc, concurrent_commands);
	tcase_add_test(tc, survives_the_runners_orphan_sweep);
	tcase_add_test(tc, helper_death_is_reported);
	tcase_add_test(tc, start_failures_leave_nothing);
	tcase_add_test(tc, end_of_channel_kills_commands);
	tcase_add_test(tc, max_idle_ends_the_helper);
	tcase_add_test(tc, find_uses_the_environment);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(make_suite());
}
