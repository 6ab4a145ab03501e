/* Tests of the Docker Engine API client (src/docker). The unit tests need nothing; every
 * other test talks to a real engine at $DOCKER_HOST (default unix:///var/run/docker.sock)
 * and fails, loudly, when none answers: scripts/check.sh starts one first
 * (scripts/docker-env.sh up). The docker backend's tests are tests/backend/test-backend-docker.c.
 *
 * Containers made here carry "caetest-<pid>" in their name; a fixture that runs in the
 * parent process removes whatever a failed test left behind. */
#include "testutil.h"
#include "dockertest.h"

#include "base/buf.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "base/utf8.h"
#include "cae/docker.h"
#include "docker/docker-internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stdarg.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

/* ===================================================================== unit tests */

struct frames {
	cae_buf out, err;
	int calls;
};

static int collect(void *ud, int stream, const char *p, size_t n)
{
	struct frames *f = ud;
	f->calls++;
	return cae__buf_append(stream == 1 ? &f->out : &f->err, p, n);
}

static size_t frame(char *dst, int stream, const char *payload)
{
	size_t n = strlen(payload);
	dst[0] = (char)stream;
	dst[1] = dst[2] = dst[3] = 0;
	dst[4] = (char)(n >> 24);
	dst[5] = (char)(n >> 16);
	dst[6] = (char)(n >> 8);
	dst[7] = (char)n;
	memcpy(dst + 8, payload, n);
	return n + 8;
}

START_TEST(demux_split_everywhere)
{
	char stream[256];
	size_t len = 0;
	len += frame(stream + len, 1, "hello ");
	len += frame(stream + len, 2, "oops\n");
	len += frame(stream + len, 1, "");
	len += frame(stream + len, 1, "world\n");
	/* Every split position, and byte-at-a-time. */
	for (size_t cut = 0; cut <= len; cut++) {
		struct frames f = {0};
		cae__buf_init(&f.out, 1024);
		cae__buf_init(&f.err, 1024);
		cae_docker_demux dm;
		cae__docker_demux_init(&dm);
		ck_assert_int_eq(cae__docker_demux_feed(&dm, stream, cut, collect, &f), 0);
		ck_assert_int_eq(cae__docker_demux_feed(&dm, stream + cut, len - cut, collect, &f),
				 0);
		ck_assert(cae__docker_demux_idle(&dm));
		ck_assert_str_eq(f.out.data, "hello world\n");
		ck_assert_str_eq(f.err.data, "oops\n");
		cae__buf_clear(&f.out);
		cae__buf_clear(&f.err);
	}
	struct frames f = {0};
	cae__buf_init(&f.out, 1024);
	cae__buf_init(&f.err, 1024);
	cae_docker_demux dm;
	cae__docker_demux_init(&dm);
	for (size_t i = 0; i < len; i++) {
		ck_assert_int_eq(cae__docker_demux_feed(&dm, stream + i, 1, collect, &f), 0);
		ck_assert(cae__docker_demux_idle(&dm) ==
			  (i == len - 1 || i == 13 || i == 13 + 13 || i == 13 + 13 + 8));
	}
	ck_assert_str_eq(f.out.data, "hello world\n");
	cae__buf_clear(&f.out);
	cae__buf_clear(&f.err);
}
END_TEST

START_TEST(demux_bad_header)
{
	struct frames f = {0};
	cae__buf_init(&f.out, 64);
	cae__buf_init(&f.err, 64);
	cae_docker_demux dm;
	cae__docker_demux_init(&dm);
	const char bad[8] = {7, 0, 0, 0, 0, 0, 0, 1};
	ck_assert_int_eq(cae__docker_demux_feed(&dm, bad, 8, collect, &f), -EPROTO);
	cae__docker_demux_init(&dm);
	const char bad2[8] = {1, 1, 0, 0, 0, 0, 0, 1};
	ck_assert_int_eq(cae__docker_demux_feed(&dm, bad2, 8, collect, &f), -EPROTO);
	/* A frame cut in the middle leaves the demuxer busy. */
	char s[64];
	size_t n = frame(s, 1, "abcdef");
	cae__docker_demux_init(&dm);
	ck_assert_int_eq(cae__docker_demux_feed(&dm, s, n - 2, collect, &f), 0);
	ck_assert(!cae__docker_demux_idle(&dm));
	cae__buf_clear(&f.out);
	cae__buf_clear(&f.err);
}
END_TEST

START_TEST(demux_large_frame)
{
	/* A 1 MiB frame fed in odd-sized pieces. */
	size_t n = 1024 * 1024;
	char *s = malloc(n + 8);
	s[0] = 2;
	s[1] = s[2] = s[3] = 0;
	s[4] = 0;
	s[5] = 0x10;
	s[6] = 0;
	s[7] = 0;
	for (size_t i = 0; i < n; i++)
		s[8 + i] = (char)('a' + i % 26);
	struct frames f = {0};
	cae__buf_init(&f.out, 16);
	cae__buf_init(&f.err, 2 * n);
	cae_docker_demux dm;
	cae__docker_demux_init(&dm);
	for (size_t off = 0; off < n + 8;) {
		size_t k = MIN((size_t)4093, n + 8 - off);
		ck_assert_int_eq(cae__docker_demux_feed(&dm, s + off, k, collect, &f), 0);
		off += k;
	}
	ck_assert_uint_eq(f.err.len, n);
	ck_assert_int_eq(memcmp(f.err.data, s + 8, n), 0);
	ck_assert(cae__docker_demux_idle(&dm));
	free(s);
	cae__buf_clear(&f.out);
	cae__buf_clear(&f.err);
}
END_TEST

START_TEST(wrap_header_parse)
{
	const char *replay;
	size_t rl;
	/* Split across pieces, followed by the command's own stderr. */
	cae_docker_wrap_header h = {0};
	const char *a = "cae-exec 12", *b = " 12 ok\nreal stderr";
	ck_assert_uint_eq(cae__docker_wrap_header_feed(&h, a, strlen(a), &replay, &rl), strlen(a));
	ck_assert(!h.done);
	size_t used = cae__docker_wrap_header_feed(&h, b, strlen(b), &replay, &rl);
	ck_assert_uint_eq(used, strlen(" 12 ok\n"));
	ck_assert(h.done);
	ck_assert_int_eq(h.status, CAE_WRAP_OK);
	ck_assert_int_eq(h.pid, 12);
	ck_assert_int_eq(h.pgid, 12);
	ck_assert_uint_eq(rl, 0);

	cae_docker_wrap_header h2 = {0};
	const char *c = "cae-exec 7  notfound\n";
	ck_assert_uint_eq(cae__docker_wrap_header_feed(&h2, c, strlen(c), &replay, &rl), strlen(c));
	ck_assert_int_eq(h2.status, CAE_WRAP_NOTFOUND);
	ck_assert_int_eq(h2.pid, 7);
	ck_assert_int_eq(h2.pgid, 0);

	/* Not a header: the bytes held back are given back. */
	cae_docker_wrap_header h3 = {0};
	const char *d1 = "cae-", *d2 = "oops";
	ck_assert_uint_eq(cae__docker_wrap_header_feed(&h3, d1, 4, &replay, &rl), 4);
	used = cae__docker_wrap_header_feed(&h3, d2, 4, &replay, &rl);
	ck_assert_uint_eq(used, 0);
	ck_assert(h3.done);
	ck_assert_int_eq(h3.status, CAE_WRAP_NONE);
	ck_assert_uint_eq(rl, 4);
	ck_assert_int_eq(memcmp(replay, "cae-", 4), 0);

	/* Looks like one, is not one. */
	cae_docker_wrap_header h4 = {0};
	const char *e = "cae-exec x\n";
	used = cae__docker_wrap_header_feed(&h4, e, strlen(e), &replay, &rl);
	ck_assert(h4.done);
	ck_assert_int_eq(h4.status, CAE_WRAP_NONE);
	ck_assert_uint_eq(used + 0, strlen(e));
	ck_assert_uint_eq(rl, strlen(e));

	/* Too long a line is not a header either. */
	cae_docker_wrap_header h5 = {0};
	char longl[300];
	memcpy(longl, "cae-exec ", 9);
	memset(longl + 9, '1', sizeof(longl) - 9);
	used = cae__docker_wrap_header_feed(&h5, longl, sizeof(longl), &replay, &rl);
	ck_assert(h5.done);
	ck_assert_int_eq(h5.status, CAE_WRAP_NONE);
	ck_assert_uint_eq(used, CAE_DOCKER_WRAP_HEADER_MAX - 1);
	ck_assert_uint_eq(rl, CAE_DOCKER_WRAP_HEADER_MAX - 1);
}
END_TEST

START_TEST(host_parse)
{
	cae_docker_endpoint ep;
	cae_error err = {0};
	ck_assert_int_eq(cae__docker_endpoint_parse(NULL, &ep, &err), 0);
	ck_assert(ep.is_unix);
	ck_assert_str_eq(ep.socket_path, "/var/run/docker.sock");
	ck_assert_str_eq(ep.host, "unix:///var/run/docker.sock");
	cae__docker_endpoint_clear(&ep);

	ck_assert_int_eq(
	    cae__docker_endpoint_parse("unix:///run/user/1000/podman/podman.sock", &ep, &err), 0);
	ck_assert_str_eq(ep.socket_path, "/run/user/1000/podman/podman.sock");
	ck_assert_str_eq(ep.base_url, "http://localhost");
	cae__docker_endpoint_clear(&ep);

	ck_assert_int_eq(cae__docker_endpoint_parse("/tmp/x.sock", &ep, &err), 0);
	ck_assert_str_eq(ep.host, "unix:///tmp/x.sock");
	cae__docker_endpoint_clear(&ep);

	ck_assert_int_eq(cae__docker_endpoint_parse("tcp://10.0.0.5:2376", &ep, &err), 0);
	ck_assert(!ep.is_unix);
	ck_assert_str_eq(ep.base_url, "http://10.0.0.5:2376");
	cae__docker_endpoint_clear(&ep);

	ck_assert_int_eq(cae__docker_endpoint_parse("tcp://docker.example", &ep, &err), 0);
	ck_assert_str_eq(ep.base_url, "http://docker.example:2375");
	ck_assert_str_eq(ep.host, "tcp://docker.example:2375");
	cae__docker_endpoint_clear(&ep);

	ck_assert_int_eq(cae__docker_endpoint_parse("tcp://[::1]:2375/", &ep, &err), 0);
	ck_assert_str_eq(ep.base_url, "http://[::1]:2375");
	cae__docker_endpoint_clear(&ep);
	ck_assert_int_eq(cae__docker_endpoint_parse("tcp://[::1]", &ep, &err), 0);
	ck_assert_str_eq(ep.base_url, "http://[::1]:2375");
	cae__docker_endpoint_clear(&ep);

	const char *bad[] = {"ssh://me@host",	"npipe:////./pipe/docker_engine",
			     "unix://rel.sock", "tcp://",
			     "tcp://host:0",	"tcp://host:99999",
			     "tcp://host:12ab", "tcp://host/path",
			     "tcp://ho st:1",	"fd://",
			     "https://h:1",	NULL};
	for (const char **b = bad; *b; b++) {
		cae_error e = {0};
		ck_assert_msg(cae__docker_endpoint_parse(*b, &ep, &e) == -EINVAL, "%s accepted",
			      *b);
		ck_assert_msg(strstr(e.message, "DOCKER_HOST") != NULL, "%s", e.message);
	}
}
END_TEST

START_TEST(version_negotiation)
{
	ck_assert_int_lt(cae__docker_version_cmp("1.9", "1.10"), 0);
	ck_assert_int_gt(cae__docker_version_cmp("1.41", "1.4"), 0);
	ck_assert_int_eq(cae__docker_version_cmp("1.41", "1.41"), 0);
	ck_assert_int_gt(cae__docker_version_cmp("2.0", "1.99"), 0);
	ck_assert_int_lt(cae__docker_version_cmp("garbage", "1.0"), 0);
	char v[16];
	cae_error err = {0};
	ck_assert_int_eq(cae__docker_negotiate("1.41", v, sizeof(v), &err), 0);
	ck_assert_str_eq(v, "1.41");
	ck_assert_int_eq(cae__docker_negotiate("1.52", v, sizeof(v), &err), 0);
	ck_assert_str_eq(v, CAE_DOCKER_API_MAX);
	ck_assert_int_eq(cae__docker_negotiate(NULL, v, sizeof(v), &err), 0);
	ck_assert_str_eq(v, CAE_DOCKER_API_MAX);
	ck_assert_int_eq(cae__docker_negotiate("1.12", v, sizeof(v), &err), -ENOTSUP);
	ck_assert(strstr(err.message, "1.12") != NULL);
	ck_assert_int_eq(cae__docker_negotiate("1.24", v, sizeof(v), &err), 0);
	ck_assert_str_eq(v, "1.24");
}
END_TEST

START_TEST(error_message_extraction)
{
	char m[64];
	const char *j = "{\"message\":\"No such image: x:latest\"}\n";
	cae__docker_error_message(j, strlen(j), m, sizeof(m));
	ck_assert_str_eq(m, "No such image: x:latest");
	const char *t = "page not found\n";
	cae__docker_error_message(t, strlen(t), m, sizeof(m));
	ck_assert_str_eq(m, "page not found");
	cae__docker_error_message(NULL, 0, m, sizeof(m));
	ck_assert_str_eq(m, "");
	ck_assert_int_eq(cae__docker_status_errno(404), -ENOENT);
	ck_assert_int_eq(cae__docker_status_errno(409), -EEXIST);
	ck_assert_int_eq(cae__docker_status_errno(500), -EIO);
}
END_TEST

START_TEST(unreachable_engine)
{
	cae_docker *d = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_docker_new("unix:///nonexistent/docker.sock", &d, &err), 0);
	int64_t t0 = cae__now_ms();
	ck_assert_int_eq(cae_docker_ping(d, 1000, &err), -ECONNREFUSED);
	ck_assert(cae__now_ms() - t0 < 5000);
	ck_assert_msg(strstr(err.message, "unix:///nonexistent/docker.sock") != NULL, "%s",
		      err.message);
	json_t *j = NULL;
	ck_assert_int_eq(cae_docker_container_list(d, true, NULL, &j, &err), -ECONNREFUSED);
	cae_docker_free(d);
	/* An engine that does not answer in time: a listening socket that never accepts. */
	cae_docker_free(NULL);
}
END_TEST

/* ===================================================================== engine: client */

/* A running container of the test image, with the limits the backend uses (small). */
static char *start_container(cae_docker *d, const char *what, json_t *extra_host_config)
{
	char name[128];
	unique_name(name, sizeof(name), what);
	json_t *cfg = json_pack(
	    "{s:s, s:[s,s], s:[], s:s, s:{s:s}, s:{s:b, s:s, s:[s], s:[s], s:I}}", "Image",
	    test_image(), "Entrypoint", "sleep", "infinity", "Cmd", "User", "1000:1000", "Labels",
	    "cae.test", "1", "HostConfig", "Init", 1, "NetworkMode", "none", "CapDrop", "ALL",
	    "SecurityOpt", "no-new-privileges", "PidsLimit", (json_int_t)256);
	if (extra_host_config)
		json_object_update(json_object_get(cfg, "HostConfig"), extra_host_config);
	char *id = NULL;
	cae_error err = {0};
	int r = cae_docker_container_create(d, name, cfg, &id, NULL, &err);
	json_decref(cfg);
	ck_assert_msg(r == 0, "create: %s", err.message);
	r = cae_docker_container_start(d, id, &err);
	ck_assert_msg(r == 0, "start: %s", err.message);
	return id;
}

static int run_in(cae_docker *d, const char *id, const char *sh, int64_t timeout_ms,
		  cae_run_result *res, cae_error *err)
{
	const char *argv[] = {"sh", "-c", sh, NULL};
	cae_docker_exec_spec spec = {
	    .argv = argv,
	    .cwd = "/workspace",
	    .timeout_ms = timeout_ms,
	    .cancel_fd = -1,
	};
	return cae_docker_exec(d, id, &spec, res, NULL, err);
}

/* Processes in the container, as the engine sees them (GET /containers/{id}/top). */
/* ---- the container or the engine going away during a command ---- */

struct bg_exec {
	cae_docker *d;
	const char *id;
	int r;
	cae_error err;
	cae_run_result res;
};

static void *bg_exec_main(void *arg)
{
	struct bg_exec *x = arg;
	const char *argv[] = {"sleep", "30", NULL};
	cae_docker_exec_spec spec = {
	    .argv = argv, .cwd = "/", .timeout_ms = 120000, .cancel_fd = -1};
	x->r = cae_docker_exec(x->d, x->id, &spec, &x->res, NULL, &x->err);
	return NULL;
}

/* Waits until the container runs `sleep 30` (as the engine sees it, through d). */
START_TEST(exec_container_killed_or_removed_is_an_error)
{
	cae_docker *d = client(), *d2 = client();
	for (int removed = 0; removed < 2; removed++) {
		char *id = start_container(d, removed ? "rmf" : "kill", NULL);
		struct bg_exec x = {.d = d2, .id = id};
		pthread_t th;
		ck_assert_int_eq(pthread_create(&th, NULL, bg_exec_main, &x), 0);
		wait_for_sleep(d, id);
		cae_error err = {0};
		if (removed)
			ck_assert_int_eq(cae_docker_container_remove(d, id, true, true, &err), 0);
		else
			ck_assert_int_eq(cae_docker_container_kill(d, id, "KILL", &err), 0);
		pthread_join(th, NULL);
		/* an error that says what happened, not exit status 137 */
		ck_assert_msg(x.r == -ECONNABORTED, "%d %s (exit %d)", x.r, x.err.message,
			      x.r == 0 ? x.res.exit_code : 0);
		ck_assert_msg(
		    strstr(x.err.message, "the environment's container stopped during the command"),
		    "%s", x.err.message);
		remove_container(d, id);
		free(id);
	}
	cae_docker_free(d2);
	cae_docker_free(d);
}
END_TEST

START_TEST(client_version_and_info)
{
	cae_docker *d = client();
	cae_error err = {0};
	const char *v = cae_docker_api_version(d, &err);
	ck_assert_ptr_nonnull(v);
	ck_assert_int_ge(cae__docker_version_cmp(v, CAE_DOCKER_API_MIN), 0);
	ck_assert_int_le(cae__docker_version_cmp(v, CAE_DOCKER_API_MAX), 0);
	json_t *info = NULL;
	ck_assert_int_eq(cae_docker_info(d, &info, &err), 0);
	ck_assert_ptr_nonnull(json_object_get(info, "Driver"));
	json_decref(info);
	/* An error carries the engine's message. */
	json_t *j = NULL;
	ck_assert_int_eq(cae_docker_container_inspect(d, "caetest-no-such-container", &j, &err),
			 -ENOENT);
	ck_assert_msg(strstr(err.message, "No such container") != NULL, "%s", err.message);
	cae_docker_free(d);
}
END_TEST

START_TEST(client_missing_image)
{
	cae_docker *d = client();
	char name[128];
	unique_name(name, sizeof(name), "noimage");
	json_t *cfg = json_pack("{s:s}", "Image", "coding-agent-executor-nonexistent:latest");
	char *id = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_docker_container_create(d, name, cfg, &id, NULL, &err), -ENOENT);
	ck_assert_msg(strstr(err.message, "coding-agent-executor-nonexistent") != NULL, "%s",
		      err.message);
	json_decref(cfg);
	cae_docker_free(d);
}
END_TEST

START_TEST(exec_streams_and_exit)
{
	cae_docker *d = client();
	char *id = start_container(d, "exec", NULL);
	cae_run_result res;
	cae_error err = {0};
	int r = run_in(d, id, "echo out; echo err >&2; printf 'x%.0s' $(seq 1 10); exit 3", 30000,
		       &res, &err);
	ck_assert_msg(r == 0, "%s", err.message);
	ck_assert_int_eq(res.exit_code, 3);
	ck_assert_str_eq(res.out, "out\nxxxxxxxxxx");
	ck_assert_str_eq(res.err, "err\n");
	ck_assert(!res.timed_out && !res.out_truncated && !res.err_truncated);
	ck_assert_uint_eq(res.out_total, 14);
	cae_run_result_clear(&res);

	/* cwd, environment, user */
	const char *argv[] = {"sh", "-c", "pwd; echo \"$FOO\"; id -u", NULL};
	const char *env[] = {"FOO=bar baz", NULL};
	cae_docker_exec_spec spec = {.argv = argv,
				     .env = env,
				     .cwd = "/workspace/tmp",
				     .cancel_fd = -1,
				     .timeout_ms = 30000};
	ck_assert_int_eq(cae_docker_exec(d, id, &spec, &res, NULL, &err), 0);
	ck_assert_str_eq(res.out, "/workspace/tmp\nbar baz\n1000\n");
	ck_assert_str_eq(res.err, "");
	cae_run_result_clear(&res);

	/* stdin: absent is /dev/null; given is delivered then closed */
	ck_assert_int_eq(run_in(d, id, "cat; echo done", 30000, &res, &err), 0);
	ck_assert_str_eq(res.out, "done\n");
	cae_run_result_clear(&res);
	size_t big = 3 * 1024 * 1024 + 17;
	char *in = malloc(big);
	for (size_t i = 0; i < big; i++)
		in[i] = (char)('a' + i % 23);
	const char *wc[] = {"sh", "-c", "wc -c; echo e >&2", NULL};
	cae_docker_exec_spec s2 = {.argv = wc,
				   .stdin_data = in,
				   .stdin_len = big,
				   .has_stdin = true,
				   .cancel_fd = -1,
				   .timeout_ms = 60000};
	ck_assert_int_eq(cae_docker_exec(d, id, &s2, &res, NULL, &err), 0);
	ck_assert_int_eq(strtol(res.out, NULL, 10), (long)big);
	ck_assert_str_eq(res.err, "e\n");
	cae_run_result_clear(&res);
	free(in);

	/* direct argv, no shell: quoting preserved */
	const char *direct[] = {"printf", "%s|", "a b", "$HOME", "'q'", NULL};
	cae_docker_exec_spec s3 = {.argv = direct, .cwd = "/", .cancel_fd = -1};
	ck_assert_int_eq(cae_docker_exec(d, id, &s3, &res, NULL, &err), 0);
	ck_assert_str_eq(res.out, "a b|$HOME|'q'|");
	cae_run_result_clear(&res);

	remove_container(d, id);
	free(id);
	cae_docker_free(d);
}
END_TEST

START_TEST(exec_errors)
{
	cae_docker *d = client();
	char *id = start_container(d, "errors", NULL);
	cae_run_result res;
	cae_error err = {0};
	const char *nf[] = {"no-such-program-xyz", "a", NULL};
	cae_docker_exec_spec s = {.argv = nf, .cwd = "/workspace", .cancel_fd = -1};
	ck_assert_int_eq(cae_docker_exec(d, id, &s, &res, NULL, &err), -ENOENT);
	ck_assert_msg(strstr(err.message, "no-such-program-xyz") != NULL, "%s", err.message);
	/* a shell builtin is not a program (execvp would not find it either) */
	const char *bi[] = {"cd", "/", NULL};
	s.argv = bi;
	ck_assert_int_eq(cae_docker_exec(d, id, &s, &res, NULL, &err), -ENOENT);
	const char *ok[] = {"true", NULL};
	s.argv = ok;
	s.cwd = "/workspace/no/such/dir";
	ck_assert_int_eq(cae_docker_exec(d, id, &s, &res, NULL, &err), -ENOTDIR);
	s.cwd = "/etc/passwd";
	ck_assert_int_eq(cae_docker_exec(d, id, &s, &res, NULL, &err), -ENOTDIR);
	/* confinement follows symlinks */
	ck_assert_int_eq(run_in(d, id, "ln -s /etc /workspace/tmp/etc-link", 30000, &res, &err), 0);
	cae_run_result_clear(&res);
	s.confine = "/workspace";
	s.cwd = "/workspace/tmp/etc-link";
	ck_assert_int_eq(cae_docker_exec(d, id, &s, &res, NULL, &err), -ENOTDIR);
	ck_assert_msg(strstr(err.message, "outside") != NULL, "%s", err.message);
	s.cwd = "/workspace/tmp/../../etc";
	ck_assert_int_eq(cae_docker_exec(d, id, &s, &res, NULL, &err), -ENOTDIR);
	s.cwd = "/workspace/tmp/..";
	ck_assert_int_eq(cae_docker_exec(d, id, &s, &res, NULL, &err), 0);
	cae_run_result_clear(&res);
	/* no such container; a stopped container */
	s.cwd = "/";
	ck_assert_int_eq(cae_docker_exec(d, "caetest-gone-container", &s, &res, NULL, &err),
			 -ESRCH);
	ck_assert_int_eq(cae_docker_container_stop(d, id, 1, &err), 0);
	ck_assert_int_eq(cae_docker_exec(d, id, &s, &res, NULL, &err), -EAGAIN);
	ck_assert_msg(strstr(err.message, "not running") != NULL, "%s", err.message);
	/* stopping twice is fine */
	ck_assert_int_eq(cae_docker_container_stop(d, id, 1, &err), 0);
	remove_container(d, id);
	ck_assert_int_eq(cae_docker_container_remove(d, id, true, true, &err), -ENOENT);
	free(id);
	cae_docker_free(d);
}
END_TEST

START_TEST(exec_caps_like_runner)
{
	cae_docker *d = client();
	char *id = start_container(d, "caps", NULL);
	cae_run_result res;
	cae_error err = {0};
	/* 5 MB of output with a 1000-byte cap: head kept, the rest counted and dropped. */
	const char *argv[] = {"sh", "-c",
			      "head -c 5000000 /dev/zero | tr '\\0' a; echo; "
			      "printf '\\303\\251%.0s' $(seq 1 600) >&2",
			      NULL};
	cae_docker_exec_spec s = {.argv = argv,
				  .cwd = "/",
				  .max_stdout = 1000,
				  .max_stderr = 1001,
				  .cancel_fd = -1,
				  .timeout_ms = 60000};
	ck_assert_int_eq(cae_docker_exec(d, id, &s, &res, NULL, &err), 0);
	ck_assert_uint_eq(res.out_len, 1000);
	ck_assert(res.out_truncated);
	ck_assert_uint_eq(res.out_total, 5000001);
	/* 1001 bytes of two-byte characters: cut at a character boundary */
	ck_assert_uint_eq(res.err_len, 1000);
	ck_assert(res.err_truncated);
	ck_assert(cae__utf8_is_valid(res.err, res.err_len));
	cae_run_result_clear(&res);

	/* the same with head_tail: both ends kept with a marker; invalid bytes become U+FFFD */
	const char *ht[] = {"sh", "-c", "echo START; seq 1 100000; printf 'END\\377'", NULL};
	cae_docker_exec_spec s2 = {.argv = ht,
				   .cwd = "/",
				   .max_stdout = 2000,
				   .truncate = CAE_TRUNCATE_HEAD_TAIL,
				   .cancel_fd = -1};
	ck_assert_int_eq(cae_docker_exec(d, id, &s2, &res, NULL, &err), 0);
	ck_assert(res.out_truncated);
	ck_assert(strncmp(res.out, "START\n", 6) == 0);
	ck_assert_msg(strstr(res.out, "END\xef\xbf\xbd") != NULL, "%s", res.out);
	cae_run_result_clear(&res);
	remove_container(d, id);
	free(id);
	cae_docker_free(d);
}
END_TEST

START_TEST(exec_timeout_kills_tree_in_container)
{
	cae_docker *d = client();
	char *id = start_container(d, "timeout", NULL);
	cae_run_result res;
	cae_error err = {0};
	/* sleep 1000 in the foreground, a TERM-ignoring child in the background */
	int64_t t0 = cae__now_ms();
	int r = run_in(d, id, "echo started; (trap '' TERM; exec sleep 1001) & exec sleep 1000",
		       2000, &res, &err);
	int64_t took = cae__now_ms() - t0;
	ck_assert_msg(r == 0, "%s", err.message);
	ck_assert(res.timed_out);
	ck_assert_str_eq(res.out, "started\n");
	ck_assert_int_eq(res.exit_code, 128 + SIGTERM);
	ck_assert_int_eq(res.term_signal, SIGTERM);
	ck_assert_msg(took < 15000, "took %lld ms", (long long)took);
	cae_run_result_clear(&res);
	char *top = top_text(d, id);
	ck_assert_msg(strstr(top, "sleep 1000") == NULL, "left behind: %s", top);
	ck_assert_msg(strstr(top, "sleep 1001") == NULL, "left behind: %s", top);
	free(top);

	/* a command that ignores SIGTERM: killed after the grace period */
	cae_docker_exec_info info;
	const char *argv[] = {"sh", "-c", "trap '' TERM; sleep 1002; sleep 1002", NULL};
	cae_docker_exec_spec s = {
	    .argv = argv, .cwd = "/", .timeout_ms = 1000, .grace_ms = 500, .cancel_fd = -1};
	ck_assert_int_eq(cae_docker_exec(d, id, &s, &res, &info, &err), 0);
	ck_assert(res.timed_out);
	ck_assert(info.killed && !info.kill_failed && !info.restarted);
	ck_assert_int_gt(info.pid, 1);
	ck_assert_int_eq(res.exit_code, 128 + SIGKILL);
	cae_run_result_clear(&res);
	top = top_text(d, id);
	ck_assert_msg(strstr(top, "sleep 1002") == NULL, "left behind: %s", top);
	free(top);

	/* a deadline shorter than the exec's own start: still a targeted kill, no restart */
	s.timeout_ms = 1;
	const char *quick[] = {"sleep", "1005", NULL};
	s.argv = quick;
	ck_assert_int_eq(cae_docker_exec(d, id, &s, &res, &info, &err), 0);
	ck_assert(res.timed_out);
	ck_assert(info.killed && !info.kill_failed && !info.restarted);
	cae_run_result_clear(&res);
	top = top_text(d, id);
	ck_assert_msg(strstr(top, "sleep 1005") == NULL, "left behind: %s", top);
	free(top);

	/* after a normal exit, background leftovers of the command are gone too */
	ck_assert_int_eq(run_in(d, id, "sleep 1003 & echo bg", 30000, &res, &err), 0);
	ck_assert_int_eq(res.exit_code, 0);
	cae_run_result_clear(&res);
	top = top_text(d, id);
	ck_assert_msg(strstr(top, "sleep 1003") == NULL, "left behind: %s", top);
	free(top);
	/* ... also one that ignores SIGTERM */
	ck_assert_int_eq(
	    run_in(d, id, "(trap '' TERM; exec sleep 1007) & echo bg", 30000, &res, &err), 0);
	ck_assert_int_eq(res.exit_code, 0);
	cae_run_result_clear(&res);
	top = top_text(d, id);
	ck_assert_msg(strstr(top, "sleep 1007") == NULL, "left behind: %s", top);
	free(top);
	remove_container(d, id);
	free(id);
	cae_docker_free(d);
}
END_TEST

static void *relay_main(void *arg)
{
	struct relay *r = arg;
	for (;;) {
		int c = accept(r->lfd, NULL, NULL);
		if (c < 0)
			return NULL;
		if (fork() == 0) {
			int u = socket(AF_UNIX, SOCK_STREAM, 0);
			struct sockaddr_un sa = {.sun_family = AF_UNIX};
			memcpy(sa.sun_path, r->sock, sizeof(r->sock));
			if (connect(u, (struct sockaddr *)&sa, sizeof(sa)) == 0)
				relay_pair(c, u);
			_exit(0);
		}
		close(c);
	}
}

START_TEST(client_over_tcp)
{
	cae_docker_endpoint ep;
	ck_assert_int_eq(cae__docker_endpoint_parse(getenv("DOCKER_HOST"), &ep, NULL), 0);
	ck_assert_msg(ep.is_unix, "this test relays to a unix socket");
	signal(SIGCHLD, SIG_IGN);
	struct relay rl = {.lfd = socket(AF_INET, SOCK_STREAM, 0)};
	snprintf(rl.sock, sizeof(rl.sock), "%s", ep.socket_path);
	cae__docker_endpoint_clear(&ep);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sin);
	ck_assert_int_eq(bind(rl.lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	ck_assert_int_eq(listen(rl.lfd, 16), 0);
	ck_assert_int_eq(getsockname(rl.lfd, (struct sockaddr *)&sin, &sl), 0);
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, relay_main, &rl), 0);

	char host[64];
	snprintf(host, sizeof(host), "tcp://127.0.0.1:%d", ntohs(sin.sin_port));
	cae_docker *d = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_docker_new(host, &d, &err), 0);
	ck_assert_msg(cae_docker_ping(d, 5000, &err) == 0, "%s", err.message);
	ck_assert_str_eq(cae_docker_host(d), host);
	char *id = start_container(d, "tcp", NULL);
	const char *argv[] = {"sh", "-c", "cat; echo; echo err >&2; exit 5", NULL};
	cae_docker_exec_spec s = {.argv = argv,
				  .cwd = "/",
				  .stdin_data = "from stdin",
				  .stdin_len = 10,
				  .has_stdin = true,
				  .cancel_fd = -1,
				  .timeout_ms = 30000};
	cae_run_result res;
	ck_assert_msg(cae_docker_exec(d, id, &s, &res, NULL, &err) == 0, "%s", err.message);
	ck_assert_str_eq(res.out, "from stdin\n");
	ck_assert_str_eq(res.err, "err\n");
	ck_assert_int_eq(res.exit_code, 5);
	cae_run_result_clear(&res);
	remove_container(d, id);
	free(id);
	cae_docker_free(d);
}
END_TEST

/* A relay whose connections can be cut: each is served by a child process it records. */
struct cut_relay {
	struct relay rl;
	pthread_mutex_t lock;
	pid_t kids[64];
	int nkids;
};

static void *cut_relay_main(void *arg)
{
	struct cut_relay *cr = arg;
	for (;;) {
		int c = accept(cr->rl.lfd, NULL, NULL);
		if (c < 0)
			return NULL;
		pid_t pid = fork();
		if (pid == 0) {
			int u = socket(AF_UNIX, SOCK_STREAM, 0);
			struct sockaddr_un sa = {.sun_family = AF_UNIX};
			memcpy(sa.sun_path, cr->rl.sock, sizeof(cr->rl.sock));
			if (connect(u, (struct sockaddr *)&sa, sizeof(sa)) == 0)
				relay_pair(c, u);
			_exit(0);
		}
		close(c);
		pthread_mutex_lock(&cr->lock);
		if (pid > 0 && cr->nkids < 64)
			cr->kids[cr->nkids++] = pid;
		pthread_mutex_unlock(&cr->lock);
	}
}

START_TEST(exec_engine_gone_is_an_error)
{
	cae_docker_endpoint ep;
	ck_assert_int_eq(cae__docker_endpoint_parse(getenv("DOCKER_HOST"), &ep, NULL), 0);
	ck_assert_msg(ep.is_unix, "this test relays to a unix socket");
	struct cut_relay cr = {.rl = {.lfd = socket(AF_INET, SOCK_STREAM, 0)}};
	pthread_mutex_init(&cr.lock, NULL);
	snprintf(cr.rl.sock, sizeof(cr.rl.sock), "%s", ep.socket_path);
	cae__docker_endpoint_clear(&ep);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sin);
	ck_assert_int_eq(bind(cr.rl.lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	ck_assert_int_eq(listen(cr.rl.lfd, 16), 0);
	ck_assert_int_eq(getsockname(cr.rl.lfd, (struct sockaddr *)&sin, &sl), 0);
	pthread_t rth;
	ck_assert_int_eq(pthread_create(&rth, NULL, cut_relay_main, &cr), 0);

	char host[64];
	snprintf(host, sizeof(host), "tcp://127.0.0.1:%d", ntohs(sin.sin_port));
	cae_docker *d = client(), *far = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_docker_new(host, &far, &err), 0);
	ck_assert_msg(cae_docker_ping(far, 5000, &err) == 0, "%s", err.message);
	char *id = start_container(d, "cut", NULL);
	struct bg_exec x = {.d = far, .id = id};
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, bg_exec_main, &x), 0);
	wait_for_sleep(d, id);
	/* The engine goes away, as far as this client can tell: no more connections, and the
	 * open ones cut. */
	shutdown(cr.rl.lfd, SHUT_RDWR);
	pthread_join(rth, NULL);
	close(cr.rl.lfd);
	pthread_mutex_lock(&cr.lock);
	for (int i = 0; i < cr.nkids; i++)
		kill(cr.kids[i], SIGKILL);
	for (int i = 0; i < cr.nkids; i++)
		waitpid(cr.kids[i], NULL, 0);
	pthread_mutex_unlock(&cr.lock);
	pthread_join(th, NULL);
	ck_assert_msg(x.r == -ECONNRESET, "%d %s (exit %d)", x.r, x.err.message,
		      x.r == 0 ? x.res.exit_code : 0);
	ck_assert_str_eq(x.err.message, "the Docker engine went away during the command");
	remove_container(d, id);
	free(id);
	cae_docker_free(far);
	cae_docker_free(d);
	pthread_mutex_destroy(&cr.lock);
}
END_TEST

struct par {
	cae_docker *d;
	const char *id;
	int n;
	int ok;
};

static void *par_worker(void *arg)
{
	struct par *p = arg;
	for (int i = 0; i < 8; i++) {
		char script[64], expect[64];
		snprintf(script, sizeof(script), "echo %d-%d; echo e%d >&2", p->n, i, i);
		snprintf(expect, sizeof(expect), "%d-%d\n", p->n, i);
		const char *argv[] = {"sh", "-c", script, NULL};
		cae_docker_exec_spec s = {
		    .argv = argv, .cwd = "/", .cancel_fd = -1, .timeout_ms = 60000};
		cae_run_result res;
		if (cae_docker_exec(p->d, p->id, &s, &res, NULL, NULL) == 0 &&
		    strcmp(res.out, expect) == 0 && res.exit_code == 0)
			p->ok++;
		cae_run_result_clear(&res);
	}
	return NULL;
}

START_TEST(exec_concurrent_one_client)
{
	cae_docker *d = client();
	char *id = start_container(d, "par", NULL);
	struct par ps[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		ps[i] = (struct par){.d = d, .id = id, .n = i};
		ck_assert_int_eq(pthread_create(&th[i], NULL, par_worker, &ps[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		ck_assert_int_eq(ps[i].ok, 8);
	}
	remove_container(d, id);
	free(id);
	cae_docker_free(d);
}
END_TEST

START_TEST(exec_cancel)
{
	cae_docker *d = client();
	char *id = start_container(d, "cancel", NULL);
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	pid_t child = fork();
	if (child == 0) {
		usleep(700 * 1000);
		ck_assert_int_eq(write(p[1], "x", 1), 1);
		_exit(0);
	}
	cae_run_result res;
	cae_error err = {0};
	const char *argv[] = {"sh", "-c", "echo hi; sleep 1004", NULL};
	cae_docker_exec_spec s = {.argv = argv, .cwd = "/", .timeout_ms = 60000, .cancel_fd = p[0]};
	cae_docker_exec_info info;
	ck_assert_int_eq(cae_docker_exec(d, id, &s, &res, &info, &err), 0);
	waitpid(child, NULL, 0);
	ck_assert(res.cancelled);
	ck_assert(!res.timed_out);
	ck_assert_str_eq(res.out, "hi\n");
	ck_assert_int_eq(res.exit_code, 128 + SIGTERM);
	ck_assert(info.killed && !info.restarted);
	cae_run_result_clear(&res);
	char *top = top_text(d, id);
	ck_assert_msg(strstr(top, "sleep 1004") == NULL, "left behind: %s", top);
	free(top);
	/* cancelled before it even started: still a targeted kill */
	const char *argv2[] = {"sleep", "1006", NULL};
	s.argv = argv2;
	ck_assert_int_eq(cae_docker_exec(d, id, &s, &res, &info, &err), 0);
	ck_assert(res.cancelled);
	ck_assert(info.killed && !info.kill_failed && !info.restarted);
	cae_run_result_clear(&res);
	top = top_text(d, id);
	ck_assert_msg(strstr(top, "sleep 1006") == NULL, "left behind: %s", top);
	free(top);
	remove_container(d, id);
	free(id);
	cae_docker_free(d);
}
END_TEST

/* The figures of a stats sample: CPU time, the engine's CPU percentage from two samples,
 * memory without the inactive page cache (cgroup v2 and v1 names), the limits. */
START_TEST(stats_summary_figures)
{
	json_t *stats = json_loads("{\"cpu_stats\":{\"cpu_usage\":{\"total_usage\":3000000000},"
				   "\"system_cpu_usage\":20000000000,\"online_cpus\":2},"
				   "\"precpu_stats\":{\"cpu_usage\":{\"total_usage\":2000000000},"
				   "\"system_cpu_usage\":10000000000},"
				   "\"memory_stats\":{\"usage\":50000000,\"limit\":1073741824,"
				   "\"stats\":{\"inactive_file\":10000000}},"
				   "\"pids_stats\":{\"current\":7,\"limit\":256}}",
				   0, NULL);
	json_t *inspect = json_loads("{\"HostConfig\":{\"NanoCpus\":1500000000}}", 0, NULL);
	ck_assert_ptr_nonnull(stats);
	json_t *s = cae_docker_stats_summary(stats, inspect);
	ck_assert(json_real_value(json_object_get(s, "cpu_seconds")) == 3.0);
	/* (1e9 / 1e10) * 2 CPUs * 100 */
	ck_assert(fabs(json_real_value(json_object_get(s, "cpu_percent")) - 20.0) < 1e-9);
	ck_assert_int_eq(json_integer_value(json_object_get(s, "memory_bytes")), 40000000);
	ck_assert_int_eq(json_integer_value(json_object_get(s, "memory_limit_bytes")), 1073741824);
	ck_assert_int_eq(json_integer_value(json_object_get(s, "pids")), 7);
	ck_assert_int_eq(json_integer_value(json_object_get(s, "pids_limit")), 256);
	ck_assert(json_real_value(json_object_get(s, "cpus_limit")) == 1.5);
	json_decref(s);
	/* one sample (one-shot), cgroup v1 names, no inspect: no percentage, no CPU limit */
	json_decref(stats);
	stats = json_loads("{\"cpu_stats\":{\"cpu_usage\":{\"total_usage\":500000000}},"
			   "\"precpu_stats\":{},"
			   "\"memory_stats\":{\"usage\":30000000,\"limit\":2000000000,"
			   "\"stats\":{\"total_inactive_file\":5000000}},"
			   "\"pids_stats\":{\"current\":1}}",
			   0, NULL);
	s = cae_docker_stats_summary(stats, NULL);
	ck_assert(json_real_value(json_object_get(s, "cpu_seconds")) == 0.5);
	ck_assert_ptr_null(json_object_get(s, "cpu_percent"));
	ck_assert_ptr_null(json_object_get(s, "cpus_limit"));
	ck_assert_ptr_null(json_object_get(s, "pids_limit"));
	ck_assert_int_eq(json_integer_value(json_object_get(s, "memory_bytes")), 25000000);
	json_decref(s);
	json_decref(stats);
	json_decref(inspect);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("docker");
	TCase *u = tcase_create("unit");
	tcase_add_test(u, demux_split_everywhere);
	tcase_add_test(u, demux_bad_header);
	tcase_add_test(u, demux_large_frame);
	tcase_add_test(u, wrap_header_parse);
	tcase_add_test(u, host_parse);
	tcase_add_test(u, version_negotiation);
	tcase_add_test(u, error_message_extraction);
	tcase_add_test(u, unreachable_engine);
	tcase_add_test(u, stats_summary_figures);
	suite_add_tcase(s, u);

	TCase *c = tcase_create("client");
	tcase_set_timeout(c, 120);
	tcase_add_unchecked_fixture(c, NULL, sweep);
	tcase_add_test(c, client_version_and_info);
	tcase_add_test(c, client_missing_image);
	tcase_add_test(c, exec_streams_and_exit);
	tcase_add_test(c, exec_errors);
	tcase_add_test(c, exec_caps_like_runner);
	tcase_add_test(c, exec_timeout_kills_tree_in_container);
	tcase_add_test(c, exec_cancel);
	tcase_add_test(c, exec_concurrent_one_client);
	tcase_add_test(c, client_over_tcp);
	tcase_add_test(c, exec_container_killed_or_removed_is_an_error);
	tcase_add_test(c, exec_engine_gone_is_an_error);
	suite_add_tcase(s, c);
	return s;
}

int main(void)
{
	dt_init();
	return tu_run(make_suite());
}
