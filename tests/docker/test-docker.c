/* Tests of the Docker Engine API client (src/docker) and of the docker backend
 * (src/backend/backend-docker.c). The unit tests need nothing; every other test talks to a real
 * engine at $DOCKER_HOST (default unix:///var/run/docker.sock) and fails, loudly, when none
 * answers: scripts/check.sh starts one first (scripts/docker-env.sh up).
 *
 * Containers made here carry "caetest-<pid>" in their name; a fixture that runs in the
 * parent process removes whatever a failed test left behind. */
#include "testutil.h"
#include "gitserver.h"

#include "backend/backend-internal.h"
#include "base/buf.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "base/utf8.h"
#include "cae/backend.h"
#include "cae/config.h"
#include "cae/docker.h"
#include "cae/log.h"
#include "cae/session.h"
#include "docker/docker-internal.h"

#include <arpa/inet.h>
#include <errno.h>
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

static const char *test_image(void)
{
	const char *s = getenv("CAE_TEST_IMAGE");
	return s && *s ? s : "coding-agent-executor-python:latest";
}

static int runner_pid;
static int name_seq;

/* A fresh name unique to this test run. */
static void unique_name(char *buf, size_t size, const char *what)
{
	snprintf(buf, size, "caetest-%d-%d-%d-%s", runner_pid, (int)getpid(), ++name_seq, what);
}

static cae_docker *client(void)
{
	cae_docker *d = NULL;
	cae_error err = {0};
	int r = cae_docker_new(getenv("DOCKER_HOST"), &d, &err);
	ck_assert_msg(r == 0, "cae_docker_new: %s", err.message);
	r = cae_docker_ping(d, 5000, &err);
	ck_assert_msg(r == 0,
		      "no Docker engine answers (%s); start one with scripts/docker-env.sh up",
		      err.message);
	return d;
}

/* ===================================================================== unit tests */

struct frames {
	cae_buf out, err;
	int calls;
};

static int collect(void *ud, int stream, const char *p, size_t n)
{
	struct frames *f = ud;
	f->calls++;
	return cae_buf_append(stream == 1 ? &f->out : &f->err, p, n);
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
		cae_buf_init(&f.out, 1024);
		cae_buf_init(&f.err, 1024);
		cae_docker_demux dm;
		cae_docker_demux_init(&dm);
		ck_assert_int_eq(cae_docker_demux_feed(&dm, stream, cut, collect, &f), 0);
		ck_assert_int_eq(cae_docker_demux_feed(&dm, stream + cut, len - cut, collect, &f),
				 0);
		ck_assert(cae_docker_demux_idle(&dm));
		ck_assert_str_eq(f.out.data, "hello world\n");
		ck_assert_str_eq(f.err.data, "oops\n");
		cae_buf_clear(&f.out);
		cae_buf_clear(&f.err);
	}
	struct frames f = {0};
	cae_buf_init(&f.out, 1024);
	cae_buf_init(&f.err, 1024);
	cae_docker_demux dm;
	cae_docker_demux_init(&dm);
	for (size_t i = 0; i < len; i++) {
		ck_assert_int_eq(cae_docker_demux_feed(&dm, stream + i, 1, collect, &f), 0);
		ck_assert(cae_docker_demux_idle(&dm) ==
			  (i == len - 1 || i == 13 || i == 13 + 13 || i == 13 + 13 + 8));
	}
	ck_assert_str_eq(f.out.data, "hello world\n");
	cae_buf_clear(&f.out);
	cae_buf_clear(&f.err);
}
END_TEST

START_TEST(demux_bad_header)
{
	struct frames f = {0};
	cae_buf_init(&f.out, 64);
	cae_buf_init(&f.err, 64);
	cae_docker_demux dm;
	cae_docker_demux_init(&dm);
	const char bad[8] = {7, 0, 0, 0, 0, 0, 0, 1};
	ck_assert_int_eq(cae_docker_demux_feed(&dm, bad, 8, collect, &f), -EPROTO);
	cae_docker_demux_init(&dm);
	const char bad2[8] = {1, 1, 0, 0, 0, 0, 0, 1};
	ck_assert_int_eq(cae_docker_demux_feed(&dm, bad2, 8, collect, &f), -EPROTO);
	/* A frame cut in the middle leaves the demuxer busy. */
	char s[64];
	size_t n = frame(s, 1, "abcdef");
	cae_docker_demux_init(&dm);
	ck_assert_int_eq(cae_docker_demux_feed(&dm, s, n - 2, collect, &f), 0);
	ck_assert(!cae_docker_demux_idle(&dm));
	cae_buf_clear(&f.out);
	cae_buf_clear(&f.err);
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
	cae_buf_init(&f.out, 16);
	cae_buf_init(&f.err, 2 * n);
	cae_docker_demux dm;
	cae_docker_demux_init(&dm);
	for (size_t off = 0; off < n + 8;) {
		size_t k = MIN((size_t)4093, n + 8 - off);
		ck_assert_int_eq(cae_docker_demux_feed(&dm, s + off, k, collect, &f), 0);
		off += k;
	}
	ck_assert_uint_eq(f.err.len, n);
	ck_assert_int_eq(memcmp(f.err.data, s + 8, n), 0);
	ck_assert(cae_docker_demux_idle(&dm));
	free(s);
	cae_buf_clear(&f.out);
	cae_buf_clear(&f.err);
}
END_TEST

START_TEST(wrap_header_parse)
{
	const char *replay;
	size_t rl;
	/* Split across pieces, followed by the command's own stderr. */
	cae_docker_wrap_header h = {0};
	const char *a = "cae-exec 12", *b = " 12 ok\nreal stderr";
	ck_assert_uint_eq(cae_docker_wrap_header_feed(&h, a, strlen(a), &replay, &rl), strlen(a));
	ck_assert(!h.done);
	size_t used = cae_docker_wrap_header_feed(&h, b, strlen(b), &replay, &rl);
	ck_assert_uint_eq(used, strlen(" 12 ok\n"));
	ck_assert(h.done);
	ck_assert_int_eq(h.status, CAE_WRAP_OK);
	ck_assert_int_eq(h.pid, 12);
	ck_assert_int_eq(h.pgid, 12);
	ck_assert_uint_eq(rl, 0);

	cae_docker_wrap_header h2 = {0};
	const char *c = "cae-exec 7  notfound\n";
	ck_assert_uint_eq(cae_docker_wrap_header_feed(&h2, c, strlen(c), &replay, &rl), strlen(c));
	ck_assert_int_eq(h2.status, CAE_WRAP_NOTFOUND);
	ck_assert_int_eq(h2.pid, 7);
	ck_assert_int_eq(h2.pgid, 0);

	/* Not a header: the bytes held back are given back. */
	cae_docker_wrap_header h3 = {0};
	const char *d1 = "cae-", *d2 = "oops";
	ck_assert_uint_eq(cae_docker_wrap_header_feed(&h3, d1, 4, &replay, &rl), 4);
	used = cae_docker_wrap_header_feed(&h3, d2, 4, &replay, &rl);
	ck_assert_uint_eq(used, 0);
	ck_assert(h3.done);
	ck_assert_int_eq(h3.status, CAE_WRAP_NONE);
	ck_assert_uint_eq(rl, 4);
	ck_assert_int_eq(memcmp(replay, "cae-", 4), 0);

	/* Looks like one, is not one. */
	cae_docker_wrap_header h4 = {0};
	const char *e = "cae-exec x\n";
	used = cae_docker_wrap_header_feed(&h4, e, strlen(e), &replay, &rl);
	ck_assert(h4.done);
	ck_assert_int_eq(h4.status, CAE_WRAP_NONE);
	ck_assert_uint_eq(used + 0, strlen(e));
	ck_assert_uint_eq(rl, strlen(e));

	/* Too long a line is not a header either. */
	cae_docker_wrap_header h5 = {0};
	char longl[300];
	memcpy(longl, "cae-exec ", 9);
	memset(longl + 9, '1', sizeof(longl) - 9);
	used = cae_docker_wrap_header_feed(&h5, longl, sizeof(longl), &replay, &rl);
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
	ck_assert_int_eq(cae_docker_endpoint_parse(NULL, &ep, &err), 0);
	ck_assert(ep.is_unix);
	ck_assert_str_eq(ep.socket_path, "/var/run/docker.sock");
	ck_assert_str_eq(ep.host, "unix:///var/run/docker.sock");
	cae_docker_endpoint_clear(&ep);

	ck_assert_int_eq(
	    cae_docker_endpoint_parse("unix:///run/user/1000/podman/podman.sock", &ep, &err), 0);
	ck_assert_str_eq(ep.socket_path, "/run/user/1000/podman/podman.sock");
	ck_assert_str_eq(ep.base_url, "http://localhost");
	cae_docker_endpoint_clear(&ep);

	ck_assert_int_eq(cae_docker_endpoint_parse("/tmp/x.sock", &ep, &err), 0);
	ck_assert_str_eq(ep.host, "unix:///tmp/x.sock");
	cae_docker_endpoint_clear(&ep);

	ck_assert_int_eq(cae_docker_endpoint_parse("tcp://10.0.0.5:2376", &ep, &err), 0);
	ck_assert(!ep.is_unix);
	ck_assert_str_eq(ep.base_url, "http://10.0.0.5:2376");
	cae_docker_endpoint_clear(&ep);

	ck_assert_int_eq(cae_docker_endpoint_parse("tcp://docker.example", &ep, &err), 0);
	ck_assert_str_eq(ep.base_url, "http://docker.example:2375");
	ck_assert_str_eq(ep.host, "tcp://docker.example:2375");
	cae_docker_endpoint_clear(&ep);

	ck_assert_int_eq(cae_docker_endpoint_parse("tcp://[::1]:2375/", &ep, &err), 0);
	ck_assert_str_eq(ep.base_url, "http://[::1]:2375");
	cae_docker_endpoint_clear(&ep);
	ck_assert_int_eq(cae_docker_endpoint_parse("tcp://[::1]", &ep, &err), 0);
	ck_assert_str_eq(ep.base_url, "http://[::1]:2375");
	cae_docker_endpoint_clear(&ep);

	const char *bad[] = {"ssh://me@host",	"npipe:////./pipe/docker_engine",
			     "unix://rel.sock", "tcp://",
			     "tcp://host:0",	"tcp://host:99999",
			     "tcp://host:12ab", "tcp://host/path",
			     "tcp://ho st:1",	"fd://",
			     "https://h:1",	NULL};
	for (const char **b = bad; *b; b++) {
		cae_error e = {0};
		ck_assert_msg(cae_docker_endpoint_parse(*b, &ep, &e) == -EINVAL, "%s accepted", *b);
		ck_assert_msg(strstr(e.message, "DOCKER_HOST") != NULL, "%s", e.message);
	}
}
END_TEST

START_TEST(version_negotiation)
{
	ck_assert_int_lt(cae_docker_version_cmp("1.9", "1.10"), 0);
	ck_assert_int_gt(cae_docker_version_cmp("1.41", "1.4"), 0);
	ck_assert_int_eq(cae_docker_version_cmp("1.41", "1.41"), 0);
	ck_assert_int_gt(cae_docker_version_cmp("2.0", "1.99"), 0);
	ck_assert_int_lt(cae_docker_version_cmp("garbage", "1.0"), 0);
	char v[16];
	cae_error err = {0};
	ck_assert_int_eq(cae_docker_negotiate("1.41", v, sizeof(v), &err), 0);
	ck_assert_str_eq(v, "1.41");
	ck_assert_int_eq(cae_docker_negotiate("1.52", v, sizeof(v), &err), 0);
	ck_assert_str_eq(v, CAE_DOCKER_API_MAX);
	ck_assert_int_eq(cae_docker_negotiate(NULL, v, sizeof(v), &err), 0);
	ck_assert_str_eq(v, CAE_DOCKER_API_MAX);
	ck_assert_int_eq(cae_docker_negotiate("1.12", v, sizeof(v), &err), -ENOTSUP);
	ck_assert(strstr(err.message, "1.12") != NULL);
	ck_assert_int_eq(cae_docker_negotiate("1.24", v, sizeof(v), &err), 0);
	ck_assert_str_eq(v, "1.24");
}
END_TEST

START_TEST(error_message_extraction)
{
	char m[64];
	const char *j = "{\"message\":\"No such image: x:latest\"}\n";
	cae_docker_error_message(j, strlen(j), m, sizeof(m));
	ck_assert_str_eq(m, "No such image: x:latest");
	const char *t = "page not found\n";
	cae_docker_error_message(t, strlen(t), m, sizeof(m));
	ck_assert_str_eq(m, "page not found");
	cae_docker_error_message(NULL, 0, m, sizeof(m));
	ck_assert_str_eq(m, "");
	ck_assert_int_eq(cae_docker_status_errno(404), -ENOENT);
	ck_assert_int_eq(cae_docker_status_errno(409), -EEXIST);
	ck_assert_int_eq(cae_docker_status_errno(500), -EIO);
}
END_TEST

START_TEST(preparer_alive_or_not)
{
	char me[CAE_PREPARER_MAX];
	cae_preparer_label(me, sizeof(me));
	ck_assert(cae_preparer_alive(me, 0, 300));
	/* a process that ended: dead, however recent */
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	if (pid == 0) {
		char l[CAE_PREPARER_MAX];
		cae_preparer_label(l, sizeof(l));
		ssize_t k = write(p[1], l, strlen(l) + 1);
		_exit(k > 0 ? 0 : 1);
	}
	char child[CAE_PREPARER_MAX] = {0};
	ck_assert_int_gt(read(p[0], child, sizeof(child) - 1), 0);
	ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
	close(p[0]);
	close(p[1]);
	ck_assert_str_ne(child, me);
	ck_assert(!cae_preparer_alive(child, (int64_t)time(NULL), 300));
	/* the same pid with another start time (a reused pid): dead */
	char reused[CAE_PREPARER_MAX + 8];
	snprintf(reused, sizeof(reused), "%.*s1", (int)(strrchr(me, '/') - me + 1), me);
	ck_assert(!cae_preparer_alive(reused, (int64_t)time(NULL), 300));
	/* another host or namespace: alive only while younger than the timeout */
	const char *far = "00000000-0000-0000-0000-000000000000/pid:[1]/42/42";
	ck_assert(cae_preparer_alive(far, (int64_t)time(NULL) - 10, 300));
	ck_assert(!cae_preparer_alive(far, (int64_t)time(NULL) - 400, 300));
	ck_assert(!cae_preparer_alive(NULL, 0, 300));
}
END_TEST

START_TEST(unreachable_engine)
{
	cae_docker *d = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_docker_new("unix:///nonexistent/docker.sock", &d, &err), 0);
	int64_t t0 = cae_now_ms();
	ck_assert_int_eq(cae_docker_ping(d, 1000, &err), -ECONNREFUSED);
	ck_assert(cae_now_ms() - t0 < 5000);
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

static void remove_container(cae_docker *d, const char *id)
{
	cae_error err = {0};
	int r = cae_docker_container_remove(d, id, true, true, &err);
	ck_assert_msg(r == 0 || r == -ENOENT, "remove: %s", err.message);
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
static char *top_text(cae_docker *d, const char *id)
{
	char path[256];
	snprintf(path, sizeof(path), "/containers/%s/top?ps_args=-eo%%20pid,args", id);
	json_t *j = NULL;
	cae_error err = {0};
	int r = cae_docker_call(d, "GET", path, NULL, &j, &err);
	ck_assert_msg(r >= 0, "top: %s", err.message);
	char *s = json_dumps(json_object_get(j, "Processes"), 0);
	json_decref(j);
	return s;
}

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
static void wait_for_sleep(cae_docker *d, const char *id)
{
	for (int i = 0; i < 600; i++) {
		char *top = top_text(d, id);
		bool seen = strstr(top, "sleep 30") != NULL;
		free(top);
		if (seen)
			return;
		nanosleep(&(struct timespec){0, 50000000L}, NULL);
	}
	ck_abort_msg("sleep 30 never started");
}

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
	ck_assert_int_ge(cae_docker_version_cmp(v, CAE_DOCKER_API_MIN), 0);
	ck_assert_int_le(cae_docker_version_cmp(v, CAE_DOCKER_API_MAX), 0);
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
	ck_assert(cae_utf8_is_valid(res.err, res.err_len));
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
	int64_t t0 = cae_now_ms();
	int r = run_in(d, id, "echo started; (trap '' TERM; exec sleep 1001) & exec sleep 1000",
		       2000, &res, &err);
	int64_t took = cae_now_ms() - t0;
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

/* A TCP listener on 127.0.0.1 relaying each connection to the engine's unix socket (with
 * half-closes passed on), so that tcp:// DOCKER_HOST is exercised against the real engine. */
struct relay {
	int lfd;
	int port;
	char sock[108];
};

static void relay_pair(int a, int b)
{
	char buf[65536];
	bool a_open = true, b_open = true;
	while (a_open || b_open) {
		struct pollfd p[2] = {{.fd = a_open ? a : -1, .events = POLLIN},
				      {.fd = b_open ? b : -1, .events = POLLIN}};
		if (poll(p, 2, 30000) <= 0)
			break;
		for (int i = 0; i < 2; i++) {
			if (!p[i].revents)
				continue;
			int from = i ? b : a, to = i ? a : b;
			ssize_t n = read(from, buf, sizeof(buf));
			if (n <= 0) {
				shutdown(to, SHUT_WR);
				if (i)
					b_open = false;
				else
					a_open = false;
				continue;
			}
			if (write(to, buf, (size_t)n) != n)
				return;
		}
	}
}

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
	ck_assert_int_eq(cae_docker_endpoint_parse(getenv("DOCKER_HOST"), &ep, NULL), 0);
	ck_assert_msg(ep.is_unix, "this test relays to a unix socket");
	signal(SIGCHLD, SIG_IGN);
	struct relay rl = {.lfd = socket(AF_INET, SOCK_STREAM, 0)};
	snprintf(rl.sock, sizeof(rl.sock), "%s", ep.socket_path);
	cae_docker_endpoint_clear(&ep);
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
	ck_assert_int_eq(cae_docker_endpoint_parse(getenv("DOCKER_HOST"), &ep, NULL), 0);
	ck_assert_msg(ep.is_unix, "this test relays to a unix socket");
	struct cut_relay cr = {.rl = {.lfd = socket(AF_INET, SOCK_STREAM, 0)}};
	pthread_mutex_init(&cr.lock, NULL);
	snprintf(cr.rl.sock, sizeof(cr.rl.sock), "%s", ep.socket_path);
	cae_docker_endpoint_clear(&ep);
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
	cae_docker_exec_spec s = {.argv = argv,
				  .cwd = "/",
				  .timeout_ms = 60000,
				  .cancel_fd = p[0],
				  .has_cancel_fd = true};
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

/* ===================================================================== engine: backend */

static void cfg_set(cae_config *cfg, const char *key, const char *value)
{
	cae_error err = {0};
	ck_assert_msg(cae_config_set(cfg, key, value, &err) == 0, "%s", err.message);
}

/* The docker backend on the host network (the engine has no bridge; the git server is on
 * loopback), modest limits, the test token as the GitHub token. */
static cae_config *dcfg(void)
{
	cae_config *cfg = cae_config_defaults(NULL);
	ck_assert_ptr_nonnull(cfg);
	cfg_set(cfg, "command_executor.backend", "docker");
	if (getenv("DOCKER_HOST") && *getenv("DOCKER_HOST"))
		cfg_set(cfg, "command_executor.docker_host", getenv("DOCKER_HOST"));
	cfg_set(cfg, "command_executor.docker.network.mode", "host");
	cfg_set(cfg, "command_executor.docker.resources.pids_limit", "256");
	cfg_set(cfg, "command_executor.docker.resources.memory_limit", "1g");
	cfg_set(cfg, "command_executor.docker.resources.cpu_limit", "1");
	cfg_set(cfg, "github.token", git_token);
	return cfg;
}

static cae_backend *dbackend(cae_config *cfg, cae_log *log)
{
	cae_backend *b = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_backend_new_named("docker", cfg, log, &b, &err) == 0, "%s", err.message);
	ck_assert_str_eq(cae_backend_name(b), "docker");
	return b;
}

static void task_uuid(char *buf, size_t size)
{
	snprintf(buf, size, "caetest-%d-%d-%d", runner_pid, (int)getpid(), ++name_seq);
}

static char repo_url[512];

/* A task for py.git over authenticated HTTP (platform github: the token applies). */
static cae_task http_task(const char *uuid)
{
	snprintf(repo_url, sizeof(repo_url), "%spy.git", git_http);
	cae_task t = {.uuid = (char *)uuid, .repo = repo_url, .platform = (char *)"github"};
	return t;
}

static cae_run_result bexec(cae_backend *b, const char *uuid, const char *script,
			    int64_t timeout_ms)
{
	const char *argv[] = {"sh", "-c", script, NULL};
	cae_exec_request req = {.argv = argv, .timeout_ms = timeout_ms, .cancel_fd = -1};
	cae_run_result r;
	cae_error err = {0};
	ck_assert_msg(cae_backend_exec(b, uuid, &req, &r, &err) == 0, "%s: %s", script,
		      err.message);
	return r;
}

static void prepare_ok(cae_backend *b, const cae_task *t, const char *env, cae_env_info *info)
{
	cae_error err = {0};
	int r = cae_backend_prepare(b, t, env, NULL, info, &err);
	ck_assert_msg(r == 0, "prepare: %s", err.message);
}

static bool container_exists(cae_docker *d, const char *uuid)
{
	char name[160];
	snprintf(name, sizeof(name), "coding-agent-exec-%s", uuid);
	json_t *j = NULL;
	cae_error err = {0};
	int r = cae_docker_container_inspect(d, name, &j, &err);
	json_decref(j);
	ck_assert_msg(r == 0 || r == -ENOENT, "%s", err.message);
	return r == 0;
}

struct steps {
	int seen[8];
	int last;
	bool ordered;
};

static void on_progress(void *ud, int step, int total, const char *msg)
{
	struct steps *s = ud;
	ck_assert_int_eq(total, 7);
	ck_assert(step >= 1 && step <= 7);
	if (step <= s->last)
		s->ordered = false;
	s->last = step;
	s->seen[step]++;
}

START_TEST(backend_prepare_pytest_cleanup)
{
	cae_config *cfg = dcfg();
	cae_backend *b = dbackend(cfg, NULL);
	cae_docker *d = client();
	char uuid[64];
	task_uuid(uuid, sizeof(uuid));
	cae_task t = http_task(uuid);
	struct steps st = {.ordered = true};
	cae_prepare_options opts = {
	    .progress = on_progress, .progress_userdata = &st, .cancel_fd = -1};
	cae_env_info info;
	cae_error err = {0};
	ck_assert_msg(cae_backend_prepare(b, &t, "python", &opts, &info, &err) == 0, "%s",
		      err.message);
	ck_assert(st.ordered);
	for (int i = 1; i <= 7; i++)
		ck_assert_int_eq(st.seen[i], 1);
	ck_assert_str_eq(info.status, "ready");
	ck_assert_str_eq(info.backend, "docker");
	ck_assert_str_eq(info.task_uuid, uuid);
	ck_assert_str_eq(info.environment_name, "python");
	ck_assert_str_eq(info.workspace_path, "/workspace/project");
	ck_assert_uint_ge(strlen(info.container_id), 12);
	ck_assert(cae_parse_iso8601(info.created_at) > 0);

	/* labels and name, through the API */
	char name[160];
	snprintf(name, sizeof(name), "coding-agent-exec-%s", uuid);
	json_t *c = NULL;
	ck_assert_int_eq(cae_docker_container_inspect(d, name, &c, &err), 0);
	json_t *labels = json_object_get(json_object_get(c, "Config"), "Labels");
	ck_assert_str_eq(json_string_value(json_object_get(labels, "cae.task_uuid")), uuid);
	ck_assert_str_eq(json_string_value(json_object_get(labels, "cae.environment")), "python");
	ck_assert_str_eq(json_string_value(json_object_get(labels, "cae.created_at")),
			 info.created_at);
	ck_assert_str_eq(json_string_value(json_object_get(c, "Id")), info.container_id);
	json_t *mounts = json_deep_copy(json_object_get(c, "Mounts"));
	json_decref(c);

	cae_run_result r = bexec(b, uuid, "python3 -m pytest -q -p no:cacheprovider 2>&1", 120000);
	ck_assert_msg(r.exit_code == 0, "pytest: %s", r.out);
	ck_assert_msg(strstr(r.out, "1 passed") != NULL, "%s", r.out);
	cae_run_result_clear(&r);
	r = bexec(b, uuid, "pwd; git remote get-url origin; ls /workspace", 30000);
	char expect[1024];
	snprintf(expect, sizeof(expect), "/workspace/project\n%s\nproject\ntmp\n", repo_url);
	ck_assert_str_eq(r.out, expect);
	cae_run_result_clear(&r);

	/* info and list agree, from a second backend (as a second process would) */
	cae_backend *b2 = dbackend(cfg, NULL);
	cae_env_info i2;
	ck_assert_int_eq(cae_backend_info(b2, uuid, &i2, &err), 0);
	ck_assert_str_eq(i2.container_id, info.container_id);
	ck_assert_str_eq(i2.status, "ready");
	ck_assert_str_eq(i2.environment_name, "python");
	cae_env_info_clear(&i2);
	json_t *list = NULL;
	ck_assert_int_eq(cae_backend_list(b2, &list, &err), 0);
	bool found = false;
	size_t i;
	json_t *e;
	json_array_foreach(list, i, e)
	{
		if (strcmp(json_string_value(json_object_get(e, "task_uuid")), uuid) == 0)
			found = true;
	}
	ck_assert(found);
	json_decref(list);

	/* cleanup leaves no container, volume or network */
	ck_assert_msg(cae_backend_cleanup(b2, uuid, &err) == 0, "%s", err.message);
	ck_assert(!container_exists(d, uuid));
	json_t *vols = NULL;
	ck_assert_int_ge(cae_docker_call(d, "GET", "/volumes", NULL, &vols, &err), 0);
	json_t *m;
	json_array_foreach(mounts, i, m)
	{
		const char *vn = json_string_value(json_object_get(m, "Name"));
		size_t k;
		json_t *v;
		json_array_foreach(json_object_get(vols, "Volumes"), k, v)
		{
			ck_assert(!vn ||
				  strcmp(vn, json_string_value(json_object_get(v, "Name"))) != 0);
		}
	}
	json_decref(vols);
	json_decref(mounts);
	char path[256];
	snprintf(path, sizeof(path), "/networks/%s", name);
	ck_assert_int_eq(cae_docker_call(d, "GET", path, NULL, NULL, &err), -ENOENT);
	ck_assert_int_eq(cae_backend_info(b2, uuid, &i2, &err), -ENOENT);
	/* cleaning up again is fine */
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	/* exec now: a clear error */
	const char *argv[] = {"true", NULL};
	cae_exec_request req = {.argv = argv, .cancel_fd = -1};
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &r, &err), -ENOENT);
	ck_assert_msg(strstr(err.message, "environment gone") != NULL, "%s", err.message);

	cae_env_info_clear(&info);
	cae_backend_free(b2);
	cae_backend_free(b);
	cae_docker_free(d);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_reprepare_starts_clean)
{
	cae_config *cfg = dcfg();
	cae_backend *b = dbackend(cfg, NULL);
	char uuid[64];
	task_uuid(uuid, sizeof(uuid));
	cae_task t = http_task(uuid);
	cae_env_info a, c;
	prepare_ok(b, &t, "python", &a);
	cae_run_result r = bexec(b, uuid,
				 "echo x > /workspace/tmp/marker; echo y > junk.txt; "
				 "export LEAK=1; echo ok",
				 30000);
	cae_run_result_clear(&r);
	prepare_ok(b, &t, "python", &c);
	ck_assert_str_ne(a.container_id, c.container_id);
	r = bexec(b, uuid, "ls /workspace/tmp; ls junk.txt 2>&1; git status --porcelain", 30000);
	ck_assert_msg(strstr(r.out, "marker") == NULL && strstr(r.out, "No such file") != NULL,
		      "%s", r.out);
	cae_run_result_clear(&r);
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&a);
	cae_env_info_clear(&c);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_unknown_environment_falls_back)
{
	cae_config *cfg = dcfg();
	cae_backend *b = dbackend(cfg, NULL);
	char uuid[64];
	task_uuid(uuid, sizeof(uuid));
	cae_task t = http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "cobol", &info);
	ck_assert_str_eq(info.environment_name, "python");
	ck_assert_uint_ge(json_array_size(info.warnings), 1);
	const char *w = json_string_value(json_array_get(info.warnings, 0));
	ck_assert_msg(strstr(w, "cobol") && strstr(w, "python"), "%s", w);
	/* the warning is recorded with the environment: a second backend sees it */
	cae_backend *b2 = dbackend(cfg, NULL);
	cae_env_info i2;
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_info(b2, uuid, &i2, &err), 0);
	ck_assert_str_eq(i2.environment_name, "python");
	ck_assert_str_eq(json_string_value(json_array_get(i2.warnings, 0)), w);
	cae_env_info_clear(&i2);
	cae_run_result r = bexec(b2, uuid, "python3 --version", 30000);
	ck_assert_int_eq(r.exit_code, 0);
	cae_run_result_clear(&r);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_backend_free(b2);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* A failed prepare names its step, and leaves no container behind. */
static void expect_prepare_failure(cae_config *cfg, cae_task *t, const char *env, const char *step,
				   const char *needle)
{
	cae_backend *b = dbackend(cfg, NULL);
	cae_docker *d = client();
	cae_env_info info;
	cae_error err = {0};
	int r = cae_backend_prepare(b, t, env, NULL, &info, &err);
	ck_assert_msg(r < 0, "prepare succeeded");
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "%s: ", step);
	ck_assert_msg(strncmp(err.message, prefix, strlen(prefix)) == 0, "%s", err.message);
	ck_assert_msg(strstr(err.message, needle) != NULL, "%s", err.message);
	ck_assert_msg(strstr(err.message, git_token) == NULL, "token in error: %s", err.message);
	ck_assert(!container_exists(d, t->uuid));
	cae_docker_free(d);
	cae_backend_free(b);
}

START_TEST(backend_missing_image)
{
	cae_config *cfg = dcfg();
	cfg_set(
	    cfg, "command_executor.environments",
	    "python=coding-agent-executor-python:latest,ghost=coding-agent-executor-ghost:latest");
	char uuid[64];
	task_uuid(uuid, sizeof(uuid));
	cae_task t = http_task(uuid);
	expect_prepare_failure(cfg, &t, "ghost", "create", "coding-agent-executor-ghost");
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_unreachable_repo)
{
	cae_config *cfg = dcfg();
	char uuid[64];
	task_uuid(uuid, sizeof(uuid));
	cae_task t = {.uuid = uuid, .repo = (char *)"http://127.0.0.1:9/nope.git"};
	expect_prepare_failure(cfg, &t, "python", "clone", "127.0.0.1");
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_wrong_token)
{
	cae_config *cfg = dcfg();
	cfg_set(cfg, "github.token", "wrong-token-0123456789");
	char uuid[64];
	task_uuid(uuid, sizeof(uuid));
	cae_task t = http_task(uuid);
	expect_prepare_failure(cfg, &t, "python", "clone", "uthentication");
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_pull_request_diff_in_shallow_clone)
{
	cae_config *cfg = dcfg();
	cae_backend *b = dbackend(cfg, NULL);
	char uuid[64];
	task_uuid(uuid, sizeof(uuid));
	char url[512];
	snprintf(url, sizeof(url), "%spy.git", git_daemon);
	cae_task t = {.uuid = uuid,
		      .repo = url,
		      .kind = CAE_TASK_PULL_REQUEST,
		      .branch = (char *)"feature",
		      .target_branch = (char *)"main"};
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	cae_run_result r = bexec(b, uuid,
				 "git rev-parse --abbrev-ref HEAD; "
				 "git diff --name-only origin/main...HEAD; "
				 "git rev-parse --is-shallow-repository",
				 30000);
	ck_assert_str_eq(r.out, "feature\nf.txt\ntrue\n");
	cae_run_result_clear(&r);
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_local_path_repository)
{
	cae_config *cfg = dcfg();
	cfg_set(cfg, "command_executor.docker.network.mode", "none");
	cae_backend *b = dbackend(cfg, NULL);
	char uuid[64];
	task_uuid(uuid, sizeof(uuid));
	/* a local clone of py.git: the container cannot see this path, nor any network */
	char *work = tu_mkdtemp();
	shf("git clone -q %s/py.git %s/repo && git -C %s/repo branch -q feature origin/feature",
	    git_root, work, work);
	char repo[600];
	snprintf(repo, sizeof(repo), "%s/repo", work);
	cae_task t = {.uuid = uuid,
		      .repo = repo,
		      .kind = CAE_TASK_PULL_REQUEST,
		      .branch = (char *)"feature",
		      .target_branch = (char *)"main"};
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	cae_run_result r =
	    bexec(b, uuid,
		  "git rev-parse --abbrev-ref HEAD; "
		  "git diff --name-only origin/main...HEAD; "
		  "git rev-parse --is-shallow-repository; git remote get-url origin; "
		  "ls /workspace/tmp",
		  30000);
	ck_assert_str_eq(r.out, "feature\nf.txt\ntrue\nfile:///workspace/tmp/.cae-src.git\n");
	cae_run_result_clear(&r);
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	/* a path that does not exist: the clone step says so, nothing is left */
	cae_backend_free(b);
	snprintf(repo, sizeof(repo), "%s/nope", work);
	cae_task t2 = {.uuid = uuid, .repo = repo};
	expect_prepare_failure(cfg, &t2, "python", "clone", "repository not found");
	cae_rm_rf(work);
	free(work);
	cae_config_free(cfg);
}
END_TEST

static bool file_contains(const char *path, const char *needle)
{
	char *text = NULL;
	size_t len = 0;
	ck_assert_int_eq(cae_read_file(AT_FDCWD, path, 64 * 1024 * 1024, &text, &len), 0);
	bool found = memmem(text, len, needle, strlen(needle)) != NULL;
	free(text);
	return found;
}

START_TEST(backend_token_appears_nowhere)
{
	cae_config *cfg = dcfg();
	char *dir = tu_mkdtemp();
	char *logpath = cae_path_join(dir, "log.jsonl");
	int logfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(logfd, 0);
	cae_log *log = cae_log_new(logfd, CAE_LOG_DEBUG);
	cae_backend *b = dbackend(cfg, log);
	cae_docker *d = client();
	char uuid[64];
	task_uuid(uuid, sizeof(uuid));
	cae_task t = http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	json_t *ij = cae_env_info_to_json(&info);
	_cleanup_free_ char *infotext = json_dumps(ij, 0);
	json_decref(ij);
	ck_assert(strstr(infotext, git_token) == NULL);

	/* .git/config and the whole container filesystem (the pattern is built in the shell so
	 * that it is not in any command line) */
	char script[1024];
	size_t half = strlen(git_token) / 2;
	snprintf(script, sizeof(script),
		 "a='%.*s'; b='%s'; cat .git/config; "
		 "grep -rIl --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev \"$a$b\" / "
		 "2>/dev/null; echo searched; "
		 "(env; cat /proc/[0-9]*/environ) 2>/dev/null | tr '\\0' '\\n' | grep -c \"$a$b\"; "
		 "echo env-searched",
		 (int)half, git_token, git_token + half);
	cae_run_result r = bexec(b, uuid, script, 120000);
	/* no command's environment holds it either */
	ck_assert_msg(strstr(r.out, "\n0\nenv-searched\n") != NULL, "%s", r.out);
	ck_assert_msg(strstr(r.out, git_token) == NULL, "token found: %s", r.out);
	ck_assert_msg(strstr(r.out, "searched\n") != NULL, "%s", r.out);
	ck_assert_msg(strstr(r.out, "url = ") != NULL, "%s", r.out);
	ck_assert(strstr(r.err, git_token) == NULL);
	cae_run_result_clear(&r);

	/* docker inspect (env, args, labels), the container's logs */
	char name[160];
	snprintf(name, sizeof(name), "coding-agent-exec-%s", uuid);
	json_t *c = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_docker_container_inspect(d, name, &c, &err), 0);
	_cleanup_free_ char *ctext = json_dumps(c, 0);
	ck_assert_msg(strstr(ctext, git_token) == NULL, "token in inspect");
	/* exec inspects of everything that ran in it */
	size_t i;
	json_t *eid;
	json_array_foreach(json_object_get(c, "ExecIDs"), i, eid)
	{
		char path[256];
		snprintf(path, sizeof(path), "/exec/%s/json", json_string_value(eid));
		json_t *x = NULL;
		if (cae_docker_call(d, "GET", path, NULL, &x, &err) >= 0) {
			_cleanup_free_ char *xt = json_dumps(x, 0);
			ck_assert_msg(strstr(xt, git_token) == NULL, "token in exec inspect");
		}
		json_decref(x);
	}
	json_decref(c);
	char lpath[256];
	snprintf(lpath, sizeof(lpath), "/containers/%s/logs?stdout=1&stderr=1", name);
	char *logs = NULL;
	size_t loglen = 0;
	ck_assert_int_ge(cae_docker_call_raw(d, "GET", lpath, &logs, &loglen, &err), 0);
	ck_assert(memmem(logs, loglen, git_token, strlen(git_token)) == NULL);
	free(logs);

	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_backend_free(b);
	cae_log_free(log);
	close(logfd);
	ck_assert(!file_contains(logpath, git_token));
	ck_assert(file_contains(logpath, "environment.ready"));
	cae_rm_rf(dir);
	free(dir);
	free(logpath);
	cae_env_info_clear(&info);
	cae_docker_free(d);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_security_and_limits)
{
	cae_config *cfg = dcfg();
	cae_backend *b = dbackend(cfg, NULL);
	cae_docker *d = client();
	char uuid[64];
	task_uuid(uuid, sizeof(uuid));
	cae_task t = http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	cae_run_result r =
	    bexec(b, uuid, "id -u; grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status",
		  30000);
	ck_assert_str_eq(r.out, "1000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
				"CapBnd:\t0000000000000000\nNoNewPrivs:\t1\n");
	cae_run_result_clear(&r);
	/* PID 1 is Docker's init, which reaps zombies */
	r = bexec(b, uuid, "cat /proc/1/comm", 30000);
	ck_assert_str_eq(r.out, "docker-init\n");
	cae_run_result_clear(&r);

	char name[160];
	snprintf(name, sizeof(name), "coding-agent-exec-%s", uuid);
	json_t *c = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_docker_container_inspect(d, name, &c, &err), 0);
	json_t *hc = json_object_get(c, "HostConfig");
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(hc, "CapDrop"), 0)),
			 "ALL");
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(hc, "SecurityOpt"), 0)),
			 "no-new-privileges");
	ck_assert_int_eq(json_integer_value(json_object_get(hc, "PidsLimit")), 256);
	ck_assert_int_eq(json_integer_value(json_object_get(hc, "Memory")), 1 << 30);
	ck_assert_int_eq(json_integer_value(json_object_get(hc, "MemorySwap")), 1 << 30);
	ck_assert_int_eq(json_integer_value(json_object_get(hc, "NanoCpus")), 1000000000);
	ck_assert_str_eq(json_string_value(json_object_get(hc, "NetworkMode")), "host");
	ck_assert(json_array_size(json_object_get(hc, "Binds")) == 0);
	ck_assert(json_array_size(json_object_get(c, "Mounts")) == 0);
	ck_assert(json_is_true(json_object_get(hc, "Init")));
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(c, "Config"), "User")),
			 "1000:1000");
	json_decref(c);
	/* the disk limit: applied, or a warning says why not */
	bool disk_warning = false;
	size_t i;
	json_t *w;
	json_array_foreach(info.warnings, i, w)
	{
		if (strstr(json_string_value(w), "disk limit"))
			disk_warning = true;
	}
	json_t *dinfo = NULL;
	ck_assert_int_eq(cae_docker_info(d, &dinfo, &err), 0);
	_cleanup_free_ char *ds = json_dumps(json_object_get(dinfo, "DriverStatus"), 0);
	bool xfs = strstr(ds, "xfs") != NULL;
	json_decref(dinfo);
	ck_assert(disk_warning || xfs);

	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_network_none_and_socket_warning)
{
	cae_config *cfg = dcfg();
	cfg_set(cfg, "command_executor.docker.network.mode", "none");
	cae_backend *b = dbackend(cfg, NULL);
	cae_docker *d = client();
	char uuid[64];
	task_uuid(uuid, sizeof(uuid));
	/* no network: the clone cannot reach the server, and the failure says so */
	cae_task t = http_task(uuid);
	cae_env_info info;
	cae_error err = {0};
	ck_assert_int_lt(cae_backend_prepare(b, &t, "python", NULL, &info, &err), 0);
	ck_assert_msg(strncmp(err.message, "clone: ", 7) == 0, "%s", err.message);
	ck_assert(!container_exists(d, uuid));
	cae_backend_free(b);

	/* from a local repository it works; the container has loopback only. The Docker socket
	 * is mounted only when configured, and then with a warning. */
	cfg_set(cfg, "command_executor.docker.mount_docker_socket", "true");
	b = dbackend(cfg, NULL);
	char *work = tu_mkdtemp();
	shf("git clone -q %s/py.git %s/repo", git_root, work);
	char repo[600];
	snprintf(repo, sizeof(repo), "%s/repo", work);
	cae_task t2 = {.uuid = uuid, .repo = repo};
	prepare_ok(b, &t2, "python", &info);
	bool warned = false;
	size_t i;
	json_t *w;
	json_array_foreach(info.warnings, i, w)
	{
		warned |= strstr(json_string_value(w), "Docker socket") != NULL;
	}
	ck_assert(warned);
	cae_run_result r =
	    bexec(b, uuid, "ls /sys/class/net; test -S /var/run/docker.sock && echo sock", 30000);
	ck_assert_str_eq(r.out, "lo\nsock\n");
	cae_run_result_clear(&r);
	char name[160];
	snprintf(name, sizeof(name), "coding-agent-exec-%s", uuid);
	json_t *c = NULL;
	ck_assert_int_eq(cae_docker_container_inspect(d, name, &c, &err), 0);
	json_t *binds = json_object_get(json_object_get(c, "HostConfig"), "Binds");
	ck_assert_uint_eq(json_array_size(binds), 1);
	ck_assert(strstr(json_string_value(json_array_get(binds, 0)), ":/var/run/docker.sock"));
	json_decref(c);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_rm_rf(work);
	free(work);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_fork_bomb_held)
{
	cae_config *cfg = dcfg();
	cfg_set(cfg, "command_executor.docker.resources.pids_limit", "64");
	cae_backend *b = dbackend(cfg, NULL);
	char uuid[64];
	task_uuid(uuid, sizeof(uuid));
	cae_task t = http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	/* a bounded burst first: forks fail with EAGAIN before 64 processes exist */
	static const char burst[] =
	    "python3 - <<'EOF'\n"
	    "import errno, os, signal\n"
	    "pids, err = [], None\n"
	    "for i in range(200):\n"
	    "    try:\n"
	    "        pid = os.fork()\n"
	    "    except OSError as e:\n"
	    "        err = e.errno\n"
	    "        break\n"
	    "    if pid == 0:\n"
	    "        signal.pause()\n"
	    "        os._exit(0)\n"
	    "    pids.append(pid)\n"
	    "for p in pids:\n"
	    "    os.kill(p, 9)\n"
	    "    os.waitpid(p, 0)\n"
	    "mx = None\n"
	    "for f in ('/sys/fs/cgroup/pids/pids.max', '/sys/fs/cgroup/pids.max'):\n"
	    "    if os.path.exists(f):\n"
	    "        mx = open(f).read().strip()\n"
	    "print(len(pids), err == errno.EAGAIN, mx)\n"
	    "EOF\n";
	cae_run_result r = bexec(b, uuid, burst, 60000);
	int forked = 0;
	char again[8] = "", mx[16] = "";
	ck_assert_msg(sscanf(r.out, "%d %7s %15s", &forked, again, mx) == 3, "%s%s", r.out, r.err);
	ck_assert_int_lt(forked, 64);
	ck_assert_int_gt(forked, 32);
	ck_assert_str_eq(again, "True");
	ck_assert_str_eq(mx, "64");
	cae_run_result_clear(&r);
	/* the real thing, with a timeout: the manager gets its result and stays usable */
	int64_t t0 = cae_now_ms();
	r = bexec(b, uuid, "b() { b | b & }; b; sleep 100", 5000);
	int64_t took = cae_now_ms() - t0;
	ck_assert_msg(took < 60000, "took %lld ms", (long long)took);
	cae_run_result_clear(&r);
	r = bexec(b, uuid, "echo alive; cat calc.py | head -1", 60000);
	ck_assert_str_eq(r.out, "alive\ndef add(a, b):\n");
	cae_run_result_clear(&r);
	r = bexec(b, uuid, "ls /proc | grep -c '^[0-9]'", 60000);
	ck_assert_int_lt(strtol(r.out, NULL, 10), 10);
	cae_run_result_clear(&r);
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_oom_is_137)
{
	cae_config *cfg = dcfg();
	cfg_set(cfg, "command_executor.docker.resources.memory_limit", "96m");
	cae_backend *b = dbackend(cfg, NULL);
	char uuid[64];
	task_uuid(uuid, sizeof(uuid));
	cae_task t = http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	cae_run_result r = bexec(b, uuid, "python3 -c \"a = b'x' * (512 * 1024 * 1024)\"", 60000);
	ck_assert_int_eq(r.exit_code, 137);
	ck_assert(!r.timed_out);
	cae_run_result_clear(&r);
	/* the environment survives its command's OOM kill */
	r = bexec(b, uuid, "echo fine", 30000);
	ck_assert_str_eq(r.out, "fine\n");
	cae_run_result_clear(&r);
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_timeout_kills_in_container)
{
	cae_config *cfg = dcfg();
	cae_backend *b = dbackend(cfg, NULL);
	cae_docker *d = client();
	char uuid[64];
	task_uuid(uuid, sizeof(uuid));
	cae_task t = http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	cae_run_result r = bexec(b, uuid, "sleep 1000", 2000);
	ck_assert(r.timed_out);
	cae_run_result_clear(&r);
	char *top = top_text(d, info.container_id);
	ck_assert_msg(strstr(top, "sleep 1000") == NULL, "left behind: %s", top);
	free(top);
	/* relative and absolute working directories; outside the workspace is refused */
	const char *argv[] = {"pwd", NULL};
	cae_exec_request req = {.argv = argv, .cwd = "..\\tmp", .cancel_fd = -1};
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &r, &err), 0);
	ck_assert_str_eq(r.out, "/workspace/tmp\n");
	cae_run_result_clear(&r);
	req.cwd = "/etc";
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &r, &err), -ENOTDIR);
	req.cwd = "../../etc";
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &r, &err), -ENOTDIR);
	req.cwd = "nope";
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &r, &err), -ENOTDIR);
	const char *nf[] = {"no-such-tool", NULL};
	cae_exec_request rq2 = {.argv = nf, .cancel_fd = -1};
	ck_assert_int_eq(cae_backend_exec(b, uuid, &rq2, &r, &err), -ENOENT);
	ck_assert_msg(strstr(err.message, "no-such-tool") != NULL, "%s", err.message);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_environment_gone)
{
	cae_config *cfg = dcfg();
	cae_backend *b = dbackend(cfg, NULL);
	cae_docker *d = client();
	char uuid[64];
	task_uuid(uuid, sizeof(uuid));
	cae_task t = http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	/* removed behind the manager's back */
	cae_error err = {0};
	ck_assert_int_eq(cae_docker_container_remove(d, info.container_id, true, true, &err), 0);
	const char *argv[] = {"true", NULL};
	cae_exec_request req = {.argv = argv, .cancel_fd = -1};
	cae_run_result r;
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &r, &err), -ENOENT);
	char expect[256];
	snprintf(expect, sizeof(expect),
		 "environment gone: container coding-agent-exec-%s no longer exists", uuid);
	ck_assert_str_eq(err.message, expect);
	/* stopped behind its back: not ready */
	cae_env_info i2;
	prepare_ok(b, &t, "python", &i2);
	ck_assert_int_eq(cae_docker_container_stop(d, i2.container_id, 1, &err), 0);
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &r, &err), -EAGAIN);
	ck_assert_msg(strstr(err.message, "not running") != NULL, "%s", err.message);
	cae_env_info_clear(&i2);
	ck_assert_int_eq(cae_backend_info(b, uuid, &i2, &err), 0);
	ck_assert_str_eq(i2.status, "exited");
	cae_env_info_clear(&i2);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* A container that looks like an environment, made directly with a chosen label. */
static char *fake_env(cae_docker *d, const char *name, const char *uuid, const char *created)
{
	json_t *cfg = json_pack("{s:s, s:[s,s], s:[], s:{s:s, s:s, s:s}, s:{s:s}}", "Image",
				test_image(), "Entrypoint", "sleep", "infinity", "Cmd", "Labels",
				"cae.task_uuid", uuid, "cae.environment", "python",
				"cae.created_at", created, "HostConfig", "NetworkMode", "none");
	char *id = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_docker_container_create(d, name, cfg, &id, NULL, &err) == 0, "%s",
		      err.message);
	json_decref(cfg);
	return id;
}

START_TEST(backend_stale_gc)
{
	cae_config *cfg = dcfg();
	cae_backend *b = dbackend(cfg, NULL);
	cae_docker *d = client();
	char old_uuid[64], new_uuid[64], other[128], n1[160], n2[160];
	task_uuid(old_uuid, sizeof(old_uuid));
	task_uuid(new_uuid, sizeof(new_uuid));
	snprintf(n1, sizeof(n1), "coding-agent-exec-%s", old_uuid);
	snprintf(n2, sizeof(n2), "coding-agent-exec-%s", new_uuid);
	unique_name(other, sizeof(other), "not-ours");
	char old[40], now[40];
	time_t two_days_ago = time(NULL) - 2 * 86400;
	struct tm tm;
	gmtime_r(&two_days_ago, &tm);
	strftime(old, sizeof(old), "%Y-%m-%dT%H:%M:%S.000Z", &tm);
	cae_iso8601_now(now, sizeof(now));
	char *a = fake_env(d, n1, old_uuid, old);
	char *bb = fake_env(d, n2, new_uuid, now);
	char *c = fake_env(d, other, old_uuid, old); /* old, but not named like ours */
	ck_assert_int_eq(cae_docker_container_start(d, a, NULL), 0);
	int removed = -1;
	cae_error err = {0};
	ck_assert_msg(cae_backend_cleanup_stale(b, 24 * 3600, &removed, &err) == 0, "%s",
		      err.message);
	ck_assert_int_ge(removed, 1);
	json_t *j = NULL;
	ck_assert_int_eq(cae_docker_container_inspect(d, a, &j, &err), -ENOENT);
	ck_assert_int_eq(cae_docker_container_inspect(d, bb, &j, &err), 0);
	json_decref(j);
	ck_assert_int_eq(cae_docker_container_inspect(d, c, &j, &err), 0);
	json_decref(j);
	/* list shows ours only */
	json_t *list = NULL;
	ck_assert_int_eq(cae_backend_list(b, &list, &err), 0);
	bool saw_new = false, saw_other = false;
	size_t i;
	json_t *e;
	json_array_foreach(list, i, e)
	{
		const char *cid = json_string_value(json_object_get(e, "container_id"));
		saw_new |= strcmp(cid, bb) == 0;
		saw_other |= strcmp(cid, c) == 0;
	}
	ck_assert(saw_new && !saw_other);
	json_decref(list);
	remove_container(d, bb);
	remove_container(d, c);
	free(a);
	free(bb);
	free(c);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* ---- the tools' view of a container gone during a command ---- */

struct bg_tool {
	cae_session *s;
	const char *tool;
	const char *args;
	cae_tool_result res;
	int r;
};

static void *bg_tool_main(void *arg)
{
	struct bg_tool *x = arg;
	json_t *a = json_loads(x->args, 0, NULL);
	cae_error err = {0};
	x->r = cae_session_call_tool(x->s, x->tool, a, NULL, &x->res, &err);
	json_decref(a);
	return NULL;
}

START_TEST(tools_report_a_container_gone_mid_command)
{
	cae_config *cfg = dcfg();
	cae_session *s = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_session_new(cfg, NULL, &s, &err) == 0, "%s", err.message);
	cae_docker *d = client();
	char uuid[64];
	task_uuid(uuid, sizeof(uuid));
	snprintf(repo_url, sizeof(repo_url), "%spy.git", git_http);
	const char *tools[] = {"exec_command", "command-executor_execute_command"};
	const char *args[] = {"{\"cwd\": \".\", \"command\": [\"sleep\", \"30\"]}",
			      "{\"command\": \"sleep 30\"}"};
	for (int i = 0; i < 2; i++) {
		json_t *pa = json_pack("{s:{s:s, s:s, s:s}}", "task", "uuid", uuid, "repo",
				       repo_url, "platform", "github");
		cae_tool_result res;
		ck_assert_int_eq(
		    cae_session_call_tool(s, "environment_prepare", pa, NULL, &res, &err), 0);
		json_decref(pa);
		ck_assert_msg(!res.is_error, "%s", res.text);
		char id[80];
		snprintf(id, sizeof(id), "%s",
			 json_string_value(json_object_get(res.structured, "container_id")));
		cae_tool_result_clear(&res);
		struct bg_tool x = {.s = s, .tool = tools[i], .args = args[i]};
		pthread_t th;
		ck_assert_int_eq(pthread_create(&th, NULL, bg_tool_main, &x), 0);
		wait_for_sleep(d, id);
		if (i == 0)
			ck_assert_int_eq(cae_docker_container_kill(d, id, "KILL", &err), 0);
		else
			ck_assert_int_eq(cae_docker_container_remove(d, id, true, true, &err), 0);
		pthread_join(th, NULL);
		ck_assert_int_eq(x.r, 0);
		json_t *o = x.res.structured;
		if (i == 0) {
			/* exec_command: a tool error, INTERNAL, saying what happened */
			ck_assert(x.res.is_error);
			json_t *e = json_object_get(o, "error");
			ck_assert_str_eq(json_string_value(json_object_get(e, "code")), "INTERNAL");
			ck_assert_msg(strstr(json_string_value(json_object_get(e, "message")),
					     "container stopped during the command"),
				      "%s", x.res.text);
		} else {
			/* execute_command (seed 000): exit -1 and the error in stderr */
			ck_assert_int_eq(json_integer_value(json_object_get(o, "exit_code")), -1);
			const char *se = json_string_value(json_object_get(o, "stderr"));
			const char *want = "Command execution error: the environment's container "
					   "stopped during the command";
			ck_assert_msg(se && strncmp(se, want, strlen(want)) == 0, "%s", x.res.text);
		}
		cae_tool_result_clear(&x.res);
	}
	json_t *ca = json_pack("{s:s}", "task_uuid", uuid);
	cae_tool_result res;
	ck_assert_int_eq(cae_session_call_tool(s, "environment_cleanup", ca, NULL, &res, &err), 0);
	cae_tool_result_clear(&res);
	json_decref(ca);
	cae_docker_free(d);
	cae_session_free(s);
}
END_TEST

/* ---- a prepare that did not finish ---- */

struct prep_child {
	int wfd;
	int hold_at;
};

static void child_progress(void *ud, int step, int total, const char *msg)
{
	(void)total;
	(void)msg;
	struct prep_child *pc = ud;
	char c = (char)('0' + step);
	if (write(pc->wfd, &c, 1) != 1)
		_exit(3);
	if (step == pc->hold_at)
		for (;;)
			pause(); /* until killed */
}

/* Forks a process that prepares uuid, reports each progress step on a pipe and stays at
 * step hold_at (0: none). Returns its pid; *rd is the pipe's read end. */
static pid_t spawn_prepare(const char *uuid, int hold_at, int *rd)
{
	int p[2];
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(p[0]);
		cae_config *cfg = dcfg();
		cae_backend *b = dbackend(cfg, NULL);
		cae_task t = http_task(uuid);
		struct prep_child pc = {.wfd = p[1], .hold_at = hold_at};
		cae_prepare_options o = {
		    .progress = child_progress, .progress_userdata = &pc, .cancel_fd = -1};
		cae_env_info info;
		cae_error err = {0};
		_exit(cae_backend_prepare(b, &t, "python", &o, &info, &err) == 0 ? 0 : 1);
	}
	close(p[1]);
	*rd = p[0];
	return pid;
}

/* Reads progress steps until `step` was reported. */
static void wait_step(int rd, int step)
{
	char c = 0;
	while (c != (char)('0' + step))
		ck_assert_msg(read(rd, &c, 1) == 1, "the prepare ended before step %d", step);
}

static const char *status_in_list(cae_backend *b, const char *uuid, json_t **keep)
{
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_list(b, keep, &err), 0);
	size_t i;
	json_t *e;
	json_array_foreach(*keep, i, e)
	{
		if (strcmp(json_string_value(json_object_get(e, "task_uuid")), uuid) == 0)
			return json_string_value(json_object_get(e, "status"));
	}
	return NULL;
}

static bool any_container(cae_docker *d, const char *uuid)
{
	char name[200];
	snprintf(name, sizeof(name), "%s.creating", uuid);
	return container_exists(d, uuid) || container_exists(d, name);
}

START_TEST(backend_killed_prepare_is_never_ready)
{
	cae_config *cfg = dcfg();
	cae_backend *b = dbackend(cfg, NULL);
	cae_docker *d = client();
	/* Killed at the start of create (before the container exists), of the clone, and of
	 * the last steps (the child waits there to be killed: no race with its next step). */
	const int points[] = {3, 4, 6};
	for (size_t k = 0; k < 3; k++) {
		char uuid[64];
		task_uuid(uuid, sizeof(uuid));
		int rd;
		pid_t pid = spawn_prepare(uuid, points[k], &rd);
		wait_step(rd, points[k]);
		ck_assert_int_eq(kill(pid, SIGKILL), 0);
		ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
		close(rd);

		cae_env_info info;
		cae_error err = {0};
		int r = cae_backend_info(b, uuid, &info, &err);
		if (points[k] == 3) {
			ck_assert_int_eq(r, -ENOENT);
		} else {
			ck_assert_msg(r == 0, "%s", err.message);
			ck_assert_str_eq(info.status, "failed");
			cae_env_info_clear(&info);
			json_t *list = NULL;
			const char *st = status_in_list(b, uuid, &list);
			ck_assert_msg(st && strcmp(st, "failed") == 0, "listed as %s", st);
			json_decref(list);
			const char *argv[] = {"true", NULL};
			cae_exec_request req = {.argv = argv, .cancel_fd = -1};
			cae_run_result res;
			ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &res, &err), -EAGAIN);
			ck_assert_msg(strstr(err.message, "is not ready"), "%s", err.message);
		}
		/* gc removes it whatever its age */
		int removed = 0;
		ck_assert_msg(cae_backend_cleanup_stale(b, 24 * 3600, &removed, &err) == 0, "%s",
			      err.message);
		ck_assert_msg(!any_container(d, uuid), "step %d: left behind", points[k]);
		ck_assert_int_eq(cae_backend_info(b, uuid, &info, &err), -ENOENT);
	}
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_prepare_in_progress_is_creating)
{
	cae_config *cfg = dcfg();
	cae_backend *b = dbackend(cfg, NULL);
	cae_docker *d = client();
	char uuid[64];
	task_uuid(uuid, sizeof(uuid));
	int rd;
	pid_t pid = spawn_prepare(uuid, 5, &rd);
	wait_step(rd, 5); /* cloned; held before the dependencies */
	cae_env_info info;
	cae_error err = {0};
	ck_assert_msg(cae_backend_info(b, uuid, &info, &err) == 0, "%s", err.message);
	ck_assert_str_eq(info.status, "creating");
	cae_env_info_clear(&info);
	json_t *list = NULL;
	const char *st = status_in_list(b, uuid, &list);
	ck_assert_msg(st && strcmp(st, "creating") == 0, "listed as %s", st);
	json_decref(list);
	const char *argv[] = {"true", NULL};
	cae_exec_request req = {.argv = argv, .cancel_fd = -1};
	cae_run_result res;
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &res, &err), -EAGAIN);
	ck_assert_msg(strstr(err.message, "still running"), "%s", err.message);
	/* its preparer lives: gc leaves it */
	int removed = 0;
	ck_assert_int_eq(cae_backend_cleanup_stale(b, 24 * 3600, &removed, &err), 0);
	ck_assert(any_container(d, uuid));
	/* the preparer dies: failed, and gc takes it */
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
	close(rd);
	ck_assert_int_eq(cae_backend_info(b, uuid, &info, &err), 0);
	ck_assert_str_eq(info.status, "failed");
	cae_env_info_clear(&info);
	ck_assert_int_eq(cae_backend_cleanup_stale(b, 24 * 3600, &removed, &err), 0);
	ck_assert(!any_container(d, uuid));
	/* a finished prepare: ready under its final name */
	pid = spawn_prepare(uuid, 0, &rd);
	int st_code;
	ck_assert_int_eq(waitpid(pid, &st_code, 0), pid);
	close(rd);
	ck_assert_msg(WIFEXITED(st_code) && WEXITSTATUS(st_code) == 0, "prepare failed");
	ck_assert(container_exists(d, uuid));
	ck_assert_int_eq(cae_backend_info(b, uuid, &info, &err), 0);
	ck_assert_str_eq(info.status, "ready");
	cae_env_info_clear(&info);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* ---- `cae prepare` killed, as an operator would meet it ---- */

/* Runs build/cae with CAE_CONFIG=config; stdout and stderr captured together. */
static char *cae_out(const char *config, const char *args, int *status)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "CAE_CONFIG=%s CAE_LOG_LEVEL=error %s %s 2>&1", config, CAE_EXE,
		 args);
	FILE *f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	cae_buf b;
	cae_buf_init(&b, 1 << 20);
	char chunk[4096];
	size_t n;
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		cae_buf_append(&b, chunk, n);
	*status = pclose(f);
	char *s = strndup(b.data ? b.data : "", b.len);
	cae_buf_clear(&b);
	return s;
}

START_TEST(cli_prepare_killed_then_gc)
{
	char *dir = tu_mkdtemp();
	char config[600];
	snprintf(config, sizeof(config), "%s/config.yaml", dir);
	tu_write(
	    dir, "config.yaml",
	    "command_executor:\n  backend: docker\n  docker:\n    network:\n      mode: host\n"
	    "    resources:\n      pids_limit: 256\n      memory_limit: 1g\n      cpu_limit: 1\n");
	cae_docker *d = client();
	/* Killed once its container exists, and once it logged that the container started
	 * (the clone comes next). A prepare that finished before the kill landed proves
	 * nothing: that round is done again. */
	for (int point = 0; point < 2; point++) {
		bool killed = false;
		for (int attempt = 0; attempt < 5 && !killed; attempt++) {
			char uuid[64], creating[200];
			task_uuid(uuid, sizeof(uuid));
			snprintf(creating, sizeof(creating), "coding-agent-exec-%s.creating", uuid);
			char repo[400];
			snprintf(repo, sizeof(repo), "%spy.git", git_daemon);
			int errp[2];
			ck_assert_int_eq(pipe2(errp, O_CLOEXEC), 0);
			pid_t pid = fork();
			ck_assert_int_ge(pid, 0);
			if (pid == 0) {
				dup2(errp[1], 2);
				int null = open("/dev/null", O_WRONLY);
				dup2(null, 1);
				setenv("CAE_CONFIG", config, 1);
				setenv("CAE_LOG_LEVEL", "info", 1);
				execl(CAE_EXE, CAE_EXE, "prepare", "--repo", repo, "--uuid", uuid,
				      (char *)NULL);
				_exit(127);
			}
			close(errp[1]);
			FILE *ef = fdopen(errp[0], "r");
			if (point == 0) {
				for (int i = 0; i < 3000 && !any_container(d, uuid); i++)
					nanosleep(&(struct timespec){0, 10000000L}, NULL);
			} else {
				char line[4096];
				while (fgets(line, sizeof(line), ef) &&
				       !strstr(line, "\"environment.create\""))
					;
			}
			kill(pid, SIGKILL);
			int st;
			ck_assert_int_eq(waitpid(pid, &st, 0), pid);
			fclose(ef);
			cae_error err = {0};
			if (!WIFSIGNALED(st)) {
				cae_config *cfg = dcfg();
				cae_backend *b = dbackend(cfg, NULL);
				cae_backend_cleanup(b, uuid, &err);
				cae_backend_free(b);
				cae_config_free(cfg);
				continue;
			}
			killed = true;
			int status;
			char *out = cae_out(config, "env list", &status);
			ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", out);
			json_t *list = json_loads(out, 0, NULL);
			ck_assert_msg(json_is_array(list), "%s", out);
			const char *st_text = NULL;
			size_t i;
			json_t *e;
			json_array_foreach(list, i, e)
			{
				if (strcmp(json_string_value(json_object_get(e, "task_uuid")),
					   uuid) == 0)
					st_text = json_string_value(json_object_get(e, "status"));
			}
			ck_assert_msg(st_text && strcmp(st_text, "failed") == 0, "%s: %s", uuid,
				      out);
			json_decref(list);
			free(out);
			out = cae_out(config, "gc", &status);
			ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", out);
			free(out);
			ck_assert_msg(!any_container(d, uuid), "gc left %s", creating);
		}
		ck_assert_msg(killed, "point %d: every prepare finished before its kill", point);
	}
	cae_docker_free(d);
	cae_rm_rf(dir);
	free(dir);
}
END_TEST

/* End of input while `cae mcp --task` still prepares (a clone from a server that accepts and
 * never answers): the prepare is cancelled, the server exits and nothing is left behind. */
START_TEST(mcp_end_of_input_cancels_task_prepare)
{
	char *dir = tu_mkdtemp();
	tu_write(
	    dir, "config.yaml",
	    "command_executor:\n  backend: docker\n  docker:\n    network:\n      mode: host\n"
	    "    resources:\n      pids_limit: 256\n      memory_limit: 1g\n      cpu_limit: 1\n");
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sin);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	ck_assert_int_eq(listen(lfd, 4), 0);
	ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&sin, &sl), 0);
	char uuid[64], task[512], config[600], taskpath[600];
	task_uuid(uuid, sizeof(uuid));
	snprintf(task, sizeof(task),
		 "{\"uuid\": \"%s\", \"repo\": \"git://127.0.0.1:%d/never.git\"}", uuid,
		 ntohs(sin.sin_port));
	tu_write(dir, "task.json", task);
	snprintf(config, sizeof(config), "%s/config.yaml", dir);
	snprintf(taskpath, sizeof(taskpath), "%s/task.json", dir);
	int in[2];
	ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(in[0], 0);
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		dup2(null, 2);
		setenv("CAE_CONFIG", config, 1);
		execl(CAE_EXE, CAE_EXE, "mcp", "--task", taskpath, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	/* the clone reached the server (and waits for an answer that never comes) */
	struct pollfd p = {.fd = lfd, .events = POLLIN};
	ck_assert_msg(poll(&p, 1, 120000) == 1, "the clone never connected");
	int conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	ck_assert_int_ge(conn, 0);
	cae_docker *d = client();
	ck_assert(any_container(d, uuid));
	close(in[1]); /* end of input */
	int st = 0;
	pid_t w = 0;
	for (int i = 0; i < 600 && w == 0; i++) { /* a generous bound: 60 s, not the clone's 300 */
		w = waitpid(pid, &st, WNOHANG);
		if (w == 0)
			nanosleep(&(struct timespec){0, 100000000L}, NULL);
	}
	if (w == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	ck_assert_msg(w == pid, "cae mcp still prepares after the end of its input");
	ck_assert_msg(!any_container(d, uuid), "the cancelled prepare left its container");
	close(conn);
	close(lfd);
	cae_docker_free(d);
	cae_rm_rf(dir);
	free(dir);
}
END_TEST

START_TEST(backend_auto_selection)
{
	cae_config *cfg = dcfg();
	char *state = tu_mkdtemp();
	cfg_set(cfg, "command_executor.backend", "auto");
	cfg_set(cfg, "command_executor.state_dir", state);
	cae_backend *b = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_backend_new(cfg, NULL, &b, &err) == 0, "%s", err.message);
	ck_assert_str_eq(cae_backend_name(b), "docker");
	cae_backend_free(b);
	/* no engine: auto is local, docker is a clear error naming the host */
	cfg_set(cfg, "command_executor.docker_host", "unix:///nonexistent/docker.sock");
	ck_assert_msg(cae_backend_new(cfg, NULL, &b, &err) == 0, "%s", err.message);
	ck_assert_str_eq(cae_backend_name(b), "local");
	cae_backend_free(b);
	ck_assert_int_lt(cae_backend_new_named("docker", cfg, NULL, &b, &err), 0);
	ck_assert_msg(strstr(err.message, "unix:///nonexistent/docker.sock") != NULL, "%s",
		      err.message);
	cae_rm_rf(state);
	free(state);
	cae_config_free(cfg);
}
END_TEST

/* ===================================================================== fixtures */

/* Removes every container this test run made (by name), also after failed tests. */
static void sweep(void)
{
	cae_docker *d = NULL;
	if (cae_docker_new(getenv("DOCKER_HOST"), &d, NULL) < 0)
		return;
	char pat[64];
	snprintf(pat, sizeof(pat), "caetest-%d-", runner_pid);
	json_t *filters = json_pack("{s:[s]}", "name", pat);
	json_t *list = NULL;
	if (cae_docker_container_list(d, true, filters, &list, NULL) == 0) {
		size_t i;
		json_t *c;
		json_array_foreach(list, i, c)
		{
			const char *cid = json_string_value(json_object_get(c, "Id"));
			if (cid)
				cae_docker_container_remove(d, cid, true, true, NULL);
		}
	}
	json_decref(list);
	json_decref(filters);
	cae_docker_free(d);
}

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
	tcase_add_test(u, preparer_alive_or_not);
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

	TCase *b = tcase_create("backend");
	tcase_set_timeout(b, 300);
	tcase_add_unchecked_fixture(b, gs_setup, gs_teardown);
	tcase_add_unchecked_fixture(b, NULL, sweep);
	tcase_add_test(b, backend_prepare_pytest_cleanup);
	tcase_add_test(b, backend_killed_prepare_is_never_ready);
	tcase_add_test(b, backend_prepare_in_progress_is_creating);
	tcase_add_test(b, tools_report_a_container_gone_mid_command);
	tcase_add_test(b, cli_prepare_killed_then_gc);
	tcase_add_test(b, mcp_end_of_input_cancels_task_prepare);
	tcase_add_test(b, backend_reprepare_starts_clean);
	tcase_add_test(b, backend_unknown_environment_falls_back);
	tcase_add_test(b, backend_missing_image);
	tcase_add_test(b, backend_unreachable_repo);
	tcase_add_test(b, backend_wrong_token);
	tcase_add_test(b, backend_pull_request_diff_in_shallow_clone);
	tcase_add_test(b, backend_local_path_repository);
	tcase_add_test(b, backend_token_appears_nowhere);
	tcase_add_test(b, backend_security_and_limits);
	tcase_add_test(b, backend_network_none_and_socket_warning);
	tcase_add_test(b, backend_fork_bomb_held);
	tcase_add_test(b, backend_oom_is_137);
	tcase_add_test(b, backend_timeout_kills_in_container);
	tcase_add_test(b, backend_environment_gone);
	tcase_add_test(b, backend_stale_gc);
	tcase_add_test(b, backend_auto_selection);
	suite_add_tcase(s, b);
	return s;
}

int main(void)
{
	runner_pid = (int)getpid();
	return tu_run(make_suite());
}
