/* Exec through the Engine API with the runner's semantics (include/cae/docker.h):
 * POST /containers/{id}/exec, then POST /exec/{id}/start on a connection of our own
 * (libcurl CONNECT_ONLY) that the engine hijacks: we write stdin into it and read the
 * multiplexed stdout/stderr frames from it, under the command's deadline; then
 * GET /exec/{id}/json for the exit code. */
#include "docker/docker-internal.h"

#include "base/buf.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "runner/capture.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "base/banned.h"

#define HEAD_MAX (16 * 1024)
#define ERROR_BODY_MAX (64 * 1024)
#define READ_CHUNK (64 * 1024)
#define KILL_TIMEOUT_MS 10000
#define EXIT_WAIT_MS 2000
#define GONE_WAIT_MS 1000 /* for the engine to record that a container died */
/* After the deadline, how long to wait for the wrapper's first line (its pid) before
 * killing without it: the wrapper prints it first thing, so this only matters for
 * deadlines of a few milliseconds. */
#define HEADER_WAIT_NS (2000 * 1000000LL)

/* ---- low-level I/O on the hijacked connection ---- */

static void conn_close(cae_docker_conn *c)
{
	if (c->h)
		curl_easy_cleanup(c->h);
	c->h = NULL;
	c->sock = CURL_SOCKET_BAD;
}

static int wait_sock(curl_socket_t s, short events, int64_t deadline_ns)
{
	for (;;) {
		int64_t now = cae__now_ns();
		if (now >= deadline_ns)
			return -ETIMEDOUT;
		struct pollfd pfd = {.fd = s, .events = events};
		int r = poll(&pfd, 1, cae__poll_timeout_ms(deadline_ns, now));
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

static int send_all(cae_docker_conn *c, const char *p, size_t n, int64_t deadline_ns)
{
	while (n > 0) {
		size_t sent = 0;
		CURLcode cc = curl_easy_send(c->h, p, n, &sent);
		if (cc == CURLE_AGAIN) {
			int r = wait_sock(c->sock, POLLOUT, deadline_ns);
			if (r < 0)
				return r;
			continue;
		}
		if (cc != CURLE_OK)
			return -EIO;
		p += sent;
		n -= sent;
	}
	return 0;
}

/* Reads what is there: > 0 bytes, 0 at end of stream, -EAGAIN, or -EIO. */
static ssize_t recv_some(cae_docker_conn *c, char *buf, size_t size)
{
	size_t n = 0;
	CURLcode cc = curl_easy_recv(c->h, buf, size, &n);
	if (cc == CURLE_AGAIN)
		return -EAGAIN;
	if (cc != CURLE_OK)
		return -EIO;
	return (ssize_t)n;
}

/* ---- POST /exec/{id}/start, hijacked ---- */

static long parse_status_line(const char *head)
{
	/* "HTTP/1.1 101 UPGRADED" */
	const char *sp = strchr(head, ' ');
	if (strncmp(head, "HTTP/1.", 7) != 0 || !sp)
		return -1;
	char *end;
	long st = strtol(sp + 1, &end, 10);
	return end > sp + 1 ? st : -1;
}

static long content_length(const char *head)
{
	const char *p = head;
	while ((p = strchr(p, '\n'))) {
		p++;
		if (strncasecmp(p, "content-length:", 15) == 0)
			return strtol(p + 15, NULL, 10);
	}
	return -1;
}

/* Starts exec_id on a new connection. On success *conn is the raw stream and *early holds
 * stream bytes that came with the response head. */
static int exec_start(cae_docker *d, const char *exec_id, cae_docker_conn *conn, cae_buf *early,
		      int64_t timeout_ms, cae_error *err)
{
	char prefix[24];
	int r = cae__docker_version_prefix(d, prefix, sizeof(prefix), err);
	if (r < 0)
		return r;
	r = cae__docker_connect_raw(d, timeout_ms, &conn->h, &conn->sock, err);
	if (r < 0)
		return r;
	static const char body[] = "{\"Detach\":false,\"Tty\":false}";
	char req[512];
	int n = snprintf(req, sizeof(req),
			 "POST %s/exec/%s/start HTTP/1.1\r\n"
			 "Host: docker\r\n"
			 "User-Agent: cae/" CAE_VERSION "\r\n"
			 "Content-Type: application/json\r\n"
			 "Connection: Upgrade\r\n"
			 "Upgrade: tcp\r\n"
			 "Content-Length: %zu\r\n\r\n%s",
			 prefix, exec_id, sizeof(body) - 1, body);
	if (n < 0 || (size_t)n >= sizeof(req)) {
		conn_close(conn);
		return cae_error_set(err, -EINVAL, "exec id too long");
	}
	int64_t deadline = cae__now_ns() + timeout_ms * 1000000LL;
	r = send_all(conn, req, (size_t)n, deadline);
	if (r < 0) {
		conn_close(conn);
		return cae_error_set(err, r, "POST /exec/%s/start: cannot send the request",
				     exec_id);
	}
	/* The response head, byte-exact: everything after it is the stream. */
	cae_buf head;
	cae__buf_init(&head, HEAD_MAX);
	char buf[4096];
	char *end = NULL;
	while (!end) {
		ssize_t k = recv_some(conn, buf, sizeof(buf));
		if (k == -EAGAIN) {
			r = wait_sock(conn->sock, POLLIN, deadline);
			if (r < 0)
				break;
			continue;
		}
		if (k <= 0) {
			r = -EIO;
			break;
		}
		if (head.len + (size_t)k > HEAD_MAX) {
			r = -EPROTO;
			break;
		}
		if (cae__buf_append(&head, buf, (size_t)k) < 0) {
			r = -ENOMEM;
			break;
		}
		end = head.data ? strstr(head.data, "\r\n\r\n") : NULL;
	}
	if (!end) {
		cae__buf_clear(&head);
		conn_close(conn);
		if (r == -ENOMEM)
			return cae_error_set(err, r, "POST /exec/%s/start: out of memory", exec_id);
		if (r == -ETIMEDOUT)
			return cae_error_set(err, r,
					     "POST /exec/%s/start: no answer within %lld ms",
					     exec_id, (long long)timeout_ms);
		return cae_error_set(err, r < 0 ? r : -EIO,
				     "POST /exec/%s/start: connection closed by the engine",
				     exec_id);
	}
	size_t head_len = (size_t)(end - head.data) + 4;
	long status = parse_status_line(head.data);
	if (status == 101 || status == 200) {
		/* the stream's first bytes: losing them would corrupt it */
		r = cae__buf_append(early, head.data + head_len, head.len - head_len);
		cae__buf_clear(&head);
		if (r < 0) {
			conn_close(conn);
			return cae_error_set(err, r, "POST /exec/%s/start: out of memory", exec_id);
		}
		return 0;
	}
	/* An error answer: its body is {"message": ...}. */
	long clen = content_length(head.data);
	cae_buf errbody;
	cae__buf_init(&errbody, ERROR_BODY_MAX);
	/* The body only adds the engine's words to an error reported anyway: capped, and
	 * dropped when memory runs out. */
	DISCARD_RESULT(cae__buf_append(&errbody, head.data + head_len, head.len - head_len));
	cae__buf_clear(&head);
	while (clen < 0 || errbody.len < (size_t)clen) {
		ssize_t k = recv_some(conn, buf, sizeof(buf));
		if (k == -EAGAIN) {
			if (wait_sock(conn->sock, POLLIN, deadline) < 0)
				break;
			continue;
		}
		if (k <= 0 || errbody.truncated)
			break;
		DISCARD_RESULT(cae__buf_append(&errbody, buf, (size_t)k)); /* as above */
	}
	conn_close(conn);
	char msg[768];
	cae__docker_error_message(errbody.data, errbody.len, msg, sizeof(msg));
	cae__buf_clear(&errbody);
	return cae_error_set(err, status > 0 ? cae__docker_status_errno(status) : -EPROTO,
			     "POST /exec/%s/start: %s (HTTP %ld)", exec_id,
			     msg[0] ? msg : "no message", status);
}

/* ---- one exec ---- */

struct run {
	cae_capture out, err;
	cae_docker_wrap_header hdr;
	bool use_header;
};

static int on_frame(void *ud, int stream, const char *p, size_t n)
{
	struct run *run = ud;
	if (stream == 1)
		return cae__capture_add(&run->out, p, n);
	if (stream != 2)
		return 0;
	if (run->use_header && !run->hdr.done) {
		const char *replay;
		size_t rlen;
		size_t used = cae__docker_wrap_header_feed(&run->hdr, p, n, &replay, &rlen);
		if (rlen > 0) {
			int r = cae__capture_add(&run->err, replay, rlen);
			if (r < 0)
				return r;
		}
		p += used;
		n -= used;
	}
	return n ? cae__capture_add(&run->err, p, n) : 0;
}

static json_t *strv_json(const char *const *v)
{
	json_t *a = json_array();
	for (; v && *v; v++)
		json_array_append_new(a, json_string(*v));
	return a;
}

static int exec_create(cae_docker *d, const char *container, const cae_docker_exec_spec *spec,
		       bool attach_stdin, char *id, size_t idsize, cae_error *err)
{
	json_t *cmd = json_array();
	if (!spec->raw) {
		json_array_append_new(cmd, json_string("sh"));
		json_array_append_new(cmd, json_string("-c"));
		json_array_append_new(cmd, json_string(cae__docker_wrapper_script));
		json_array_append_new(cmd, json_string("cae-exec"));
		json_array_append_new(cmd, json_string(spec->cwd ? spec->cwd : "/"));
		json_array_append_new(cmd, json_string(spec->confine ? spec->confine : ""));
	}
	for (const char *const *a = spec->argv; *a; a++) {
		json_t *s = json_string(*a);
		if (!s) {
			json_decref(cmd);
			return cae_error_set(err, -EINVAL, "argument is not valid UTF-8");
		}
		json_array_append_new(cmd, s);
	}
	json_t *body = json_pack("{s:b, s:b, s:b, s:b, s:o}", "AttachStdin", attach_stdin,
				 "AttachStdout", 1, "AttachStderr", 1, "Tty", 0, "Cmd", cmd);
	if (!body)
		return cae_error_set(err, -ENOMEM, "out of memory");
	if (spec->env && spec->env[0]) {
		json_t *env = strv_json(spec->env);
		for (size_t i = 0; i < json_array_size(env); i++)
			if (!json_is_string(json_array_get(env, i))) {
				json_decref(env);
				json_decref(body);
				return cae_error_set(err, -EINVAL,
						     "environment entry is not valid UTF-8");
			}
		json_object_set_new(body, "Env", env);
	}
	if (spec->user)
		json_object_set_new(body, "User", json_string(spec->user));
	if (spec->raw && spec->cwd)
		json_object_set_new(body, "WorkingDir", json_string(spec->cwd));
	_cleanup_free_ char *ec = cae__docker_escape(container);
	char path[512];
	if (!ec || snprintf(path, sizeof(path), "/containers/%s/exec", ec) >= (int)sizeof(path)) {
		json_decref(body);
		return cae_error_set(err, -EINVAL, "bad container name");
	}
	json_t *resp = NULL;
	int r = cae_docker_call(d, "POST", path, body, &resp, err);
	json_decref(body);
	if (r == -ENOENT)
		return cae_error_set(err, -ESRCH, "no such container: %s", container);
	if (r == -EEXIST)
		return cae_error_set(err, -EAGAIN, "container %s is not running (%s)", container,
				     err ? err->message : "");
	if (r < 0)
		return r;
	const char *eid = json_string_value(json_object_get(resp, "Id"));
	if (!eid || strlen(eid) >= idsize || strspn(eid, "0123456789abcdefABCDEF") != strlen(eid)) {
		json_decref(resp);
		return cae_error_set(err, -EPROTO, "POST %s: no exec Id in the answer", path);
	}
	snprintf(id, idsize, "%s", eid);
	json_decref(resp);
	return 0;
}

/* Exit code of a finished exec; waits a little for the engine to record it. */
static int exec_exit_code(cae_docker *d, const char *exec_id, int *code, cae_error *err)
{
	char path[160];
	snprintf(path, sizeof(path), "/exec/%s/json", exec_id);
	int64_t until = cae__now_ms() + EXIT_WAIT_MS;
	long delay_us = 1000;
	for (;;) {
		json_t *j = NULL;
		int r = cae_docker_call(d, "GET", path, NULL, &j, err);
		if (r < 0)
			return r;
		json_t *running = json_object_get(j, "Running");
		json_t *ec = json_object_get(j, "ExitCode");
		if (!json_is_true(running) && json_is_integer(ec)) {
			*code = (int)json_integer_value(ec);
			json_decref(j);
			return 0;
		}
		json_decref(j);
		if (cae__now_ms() >= until)
			return cae_error_set(err, -EBUSY, "exec %.12s is still running", exec_id);
		nanosleep(&(struct timespec){0, delay_us * 1000}, NULL);
		delay_us = MIN(delay_us * 2, 100000);
	}
}

static int check_still_there_once(cae_docker *d, const char *container, cae_error *err);

static int check_still_there(cae_docker *d, const char *container, cae_error *err);

int cae_docker_container_still_running(cae_docker *d, const char *container, cae_error *err)
{
	return check_still_there(d, container, err);
}

/* After a command's stream ended on its own: whether its container or the engine went
 * away meanwhile (docker kill / rm -f / stop from outside, the engine stopped, the
 * connection cut), which a bare exit status (137 when the container was killed) would
 * hide. 0 when the container is still running; else -ECONNABORTED or -ECONNRESET with err
 * set. */
static int check_still_there(cae_docker *d, const char *container, cae_error *err)
{
	/* The engine records a killed container's state a moment after its processes died
	 * (the command's stream ends first): a container still "running" is asked again for a
	 * little while. A command the kernel OOM-killed pays that wait. */
	int64_t until = cae__now_ms() + GONE_WAIT_MS;
	long delay_us = 2000;
	int r;
	while ((r = check_still_there_once(d, container, err)) == 0 && cae__now_ms() < until) {
		nanosleep(&(struct timespec){0, delay_us * 1000}, NULL);
		delay_us = MIN(delay_us * 2, 200000);
	}
	return r;
}

static int check_still_there_once(cae_docker *d, const char *container, cae_error *err)
{
	json_t *c = NULL;
	cae_error e;
	int r = cae_docker_container_inspect(d, container, &c, &e);
	if (r == -ENOENT)
		return cae_error_set(err, -ECONNABORTED,
				     "the environment's container stopped during the command (it "
				     "was removed)");
	if (r < 0)
		return cae_error_set(err, -ECONNRESET,
				     "the Docker engine went away during the command");
	json_t *state = json_object_get(c, "State");
	bool running = json_is_true(json_object_get(state, "Running"));
	char status[32];
	snprintf(status, sizeof(status), "%s",
		 json_string_value(json_object_get(state, "Status"))
		     ? json_string_value(json_object_get(state, "Status"))
		     : "not running");
	json_decref(c);
	if (running)
		return 0;
	return cae_error_set(err, -ECONNABORTED,
			     "the environment's container stopped during the command (it is %s)",
			     status);
}

/* Signals the command's session inside the container through a second (raw) exec. */
static int kill_session(cae_docker *d, const char *container, const char *user, int sid,
			const char *sig, cae_error *err)
{
	char sidtext[16];
	snprintf(sidtext, sizeof(sidtext), "%d", sid);
	const char *argv[] = {"sh", "-c", cae__docker_kill_script, "cae-kill", sig, sidtext, NULL};
	cae_docker_exec_spec ks = {
	    .argv = argv,
	    .user = user,
	    .raw = true,
	    .timeout_ms = KILL_TIMEOUT_MS,
	    .max_stdout = 4096,
	    .max_stderr = 4096,
	    .cancel_fd = -1,
	};
	cae_run_result res;
	int r = cae_docker_exec(d, container, &ks, &res, NULL, err);
	if (r < 0)
		return r;
	if (res.exit_code != 0 || res.timed_out) {
		r = cae_error_set(err, -EIO, "kill exec failed (exit %d): %.300s%.300s",
				  res.exit_code, res.out ? res.out : "", res.err ? res.err : "");
	}
	cae_run_result_clear(&res);
	return r;
}

typedef enum { ST_RUNNING, ST_TERM_SENT, ST_KILLED } exec_state;

struct killer {
	cae_docker *d;
	const char *container;
	const cae_docker_exec_spec *spec;
	cae_docker_exec_info *info;
	int pid;
};

/* One step of the kill sequence; falls back to restarting the container when the kill
 * exec cannot run (or when the command's pid is unknown). */
static void kill_step(struct killer *k, const char *sig)
{
	k->info->killed = true;
	if (k->spec->raw)
		return; /* raw execs have no known process tree: closing the stream is all */
	int r = -ESRCH;
	if (k->pid > 0)
		r = kill_session(k->d, k->container, k->spec->user, k->pid, sig, NULL);
	if (r == 0)
		return;
	k->info->kill_failed = true;
	if (strcmp(sig, "KILL") != 0 || !k->spec->allow_restart || k->info->restarted)
		return;
	/* Every process in the container ends with its PID 1; the files stay. */
	if (cae_docker_container_restart(k->d, k->container, 0, NULL) == 0)
		k->info->restarted = true;
}

/* A container the engine pauses (a commit: an environment's snapshot or fork) answers an
 * exec with 409 until the commit ends: wait_unpaused says whether that was why (the
 * engine's message, or the container paused now) and waits (up to PAUSED_WAIT_MS) until it
 * is not paused any more: true to try again. */
#define PAUSED_TRIES 3
#define PAUSED_WAIT_MS 30000

static bool wait_unpaused(cae_docker *d, const char *container, const cae_error *err)
{
	bool was = err && strstr(err->message, "paused") != NULL;
	for (int64_t t0 = cae__now_ms(); cae__now_ms() - t0 < PAUSED_WAIT_MS;) {
		json_t *c = NULL;
		if (cae_docker_container_inspect(d, container, &c, NULL) < 0)
			return false;
		bool paused = json_is_true(json_object_get(json_object_get(c, "State"), "Paused"));
		json_decref(c);
		if (!paused)
			return was;
		was = true;
		nanosleep(&(struct timespec){0, 50000000L}, NULL);
	}
	return false;
}

int cae_docker_exec(cae_docker *d, const char *container, const cae_docker_exec_spec *spec,
		    cae_run_result *res, cae_docker_exec_info *info_out, cae_error *err)
{
	memset(res, 0, sizeof(*res));
	cae_docker_exec_info info_local;
	cae_docker_exec_info *info = info_out ? info_out : &info_local;
	memset(info, 0, sizeof(*info));
	if (!spec->argv || !spec->argv[0])
		return cae_error_set(err, -EINVAL, "no command to run");
	if (!spec->raw && spec->cwd && spec->cwd[0] != '/')
		return cae_error_set(err, -EINVAL, "working directory must be absolute: %s",
				     spec->cwd);
	int64_t grace_ms = spec->grace_ms > 0 ? spec->grace_ms : CAE_RUNNER_DEFAULT_GRACE_MS;
	int64_t drain_ms = spec->drain_ms > 0 ? spec->drain_ms : CAE_RUNNER_DEFAULT_DRAIN_MS;
	size_t max_out = spec->max_stdout ? spec->max_stdout : CAE_RUNNER_DEFAULT_MAX_OUTPUT;
	size_t max_err = spec->max_stderr ? spec->max_stderr : CAE_RUNNER_DEFAULT_MAX_OUTPUT;
	bool send_stdin = spec->has_stdin && spec->stdin_len > 0;

	int64_t t0 = cae__now_ns();
	int r;
	cae_docker_conn conn = {.sock = CURL_SOCKET_BAD};
	cae_buf early;
	for (int tries = 0;; tries++) {
		r = exec_create(d, container, spec, send_stdin, info->exec_id,
				sizeof(info->exec_id), err);
		if (r == -EAGAIN && tries < PAUSED_TRIES && wait_unpaused(d, container, err))
			continue;
		if (r < 0)
			return r;
		cae__buf_init(&early, HEAD_MAX);
		/* The start call answers at once (the stream follows): the API call timeout
		 * applies. */
		r = exec_start(d, info->exec_id, &conn, &early, CAE_DOCKER_DEFAULT_TIMEOUT_MS, err);
		if (r != -EEXIST || tries >= PAUSED_TRIES || !wait_unpaused(d, container, err))
			break;
		cae__buf_clear(&early);
	}
	if (r == -EEXIST)
		r = cae_error_set(err, -EAGAIN, "container %s is not running", container);
	if (r < 0) {
		cae__buf_clear(&early);
		return r;
	}

	struct run run = {.use_header = !spec->raw};
	cae__capture_init(&run.out, max_out, spec->truncate);
	cae__capture_init(&run.err, max_err, spec->truncate);
	cae_docker_demux dm;
	cae__docker_demux_init(&dm);
	struct killer killer = {.d = d, .container = container, .spec = spec, .info = info};

	int ret = 0;
	bool eof = false;
	if (early.len > 0)
		ret = cae__docker_demux_feed(&dm, early.data, early.len, on_frame, &run);
	cae__buf_clear(&early);

	const char *in_p = spec->stdin_data;
	size_t in_left = send_stdin ? spec->stdin_len : 0;
	bool in_closed = !send_stdin;
	exec_state st = ST_RUNNING;
	int64_t deadline = spec->timeout_ms > 0 ? t0 + spec->timeout_ms * 1000000LL : INT64_MAX;
	int64_t kill_at = INT64_MAX, drain_until = INT64_MAX;
	char *chunk = malloc(READ_CHUNK);
	if (!chunk)
		ret = cae_error_set(err, -ENOMEM, "out of memory");

	while (ret == 0 && !eof) {
		int64_t now = cae__now_ns();
		if (run.hdr.done && run.hdr.pid > 0)
			killer.pid = run.hdr.pid;
		bool know_pid = spec->raw || run.hdr.done;
		/* Timeout, or cancellation (which moved the deadline to its arrival). */
		if (st == ST_RUNNING && now >= deadline &&
		    (know_pid || now >= deadline + HEADER_WAIT_NS)) {
			if (!res->cancelled)
				res->timed_out = true;
			kill_step(&killer, "TERM");
			st = ST_TERM_SENT;
			kill_at = cae__now_ns() +
				  (res->cancelled ? MIN(grace_ms, 500) : grace_ms) * 1000000LL;
			continue;
		}
		if (st == ST_TERM_SENT && now >= kill_at) {
			kill_step(&killer, "KILL");
			st = ST_KILLED;
			drain_until = cae__now_ns() + drain_ms * 1000000LL;
			continue;
		}
		if (st == ST_KILLED && now >= drain_until)
			break; /* something still holds the stream: stop reading */

		struct pollfd pfd[2];
		int n = 0, i_cancel = -1;
		pfd[n++] = (struct pollfd){.fd = conn.sock,
					   .events = (short)(POLLIN | (in_left ? POLLOUT : 0))};
		if (st == ST_RUNNING && !res->cancelled && spec->cancel_fd >= 0)
			pfd[i_cancel = n++] =
			    (struct pollfd){.fd = spec->cancel_fd, .events = POLLIN};
		int64_t next = st == ST_RUNNING	    ? deadline
			       : st == ST_TERM_SENT ? kill_at
						    : drain_until;
		if (st == ST_RUNNING && !know_pid && now >= deadline)
			next = deadline + HEADER_WAIT_NS;
		int pr = poll(pfd, (nfds_t)n, cae__poll_timeout_ms(next, now));
		if (pr < 0 && errno != EINTR) {
			ret = cae_error_set(err, -errno, "poll: %s", strerror(errno));
			break;
		}
		if (pr <= 0)
			continue;
		if (i_cancel >= 0 && pfd[i_cancel].revents) {
			res->cancelled = true;
			deadline = cae__now_ns();
		}
		if (pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			for (;;) {
				ssize_t k = recv_some(&conn, chunk, READ_CHUNK);
				if (k == -EAGAIN)
					break;
				if (k <= 0) {
					eof = true; /* end of stream (or the connection broke) */
					break;
				}
				ret = cae__docker_demux_feed(&dm, chunk, (size_t)k, on_frame, &run);
				if (ret < 0) {
					cae_error_set(err, ret,
						      "exec %.12s: bad stream from the engine",
						      info->exec_id);
					break;
				}
			}
		}
		if (!eof && in_left > 0 && (pfd[0].revents & POLLOUT)) {
			size_t sent = 0;
			CURLcode cc =
			    curl_easy_send(conn.h, in_p, MIN(in_left, (size_t)READ_CHUNK), &sent);
			if (cc == CURLE_OK) {
				in_p += sent;
				in_left -= sent;
			} else if (cc != CURLE_AGAIN) {
				in_left = 0; /* the command stopped reading */
			}
		}
		if (!in_closed && in_left == 0) {
			shutdown(conn.sock, SHUT_WR); /* end of stdin for the command */
			in_closed = true;
		}
	}
	/* The command ended after SIGTERM: what ignored it in its session gets SIGKILL now
	 * (the runner kills the group at once when the main process is gone). */
	if (ret == 0 && st == ST_TERM_SENT) {
		if (run.hdr.done && run.hdr.pid > 0)
			killer.pid = run.hdr.pid;
		kill_step(&killer, "KILL");
	}
	free(chunk);
	conn_close(&conn);
	if (run.hdr.done && run.hdr.pid > 0)
		info->pid = run.hdr.pid;
	/* The header may sit alone in a capture that never saw a newline: give it back. */
	if (run.use_header && !run.hdr.done && run.hdr.len > 0)
		cae__capture_add(&run.err, run.hdr.buf, run.hdr.len);
	res->duration_us = (cae__now_ns() - t0) / 1000;

	if (ret == 0) {
		int code = -1;
		cae_error e2;
		int xr = exec_exit_code(d, info->exec_id, &code, &e2);
		/* Not our kill, and no status or SIGKILL/SIGTERM's: did the command die, or the
		 * container or the engine under it? (A command the kernel OOM-killed in a
		 * running container is 137, as it should be.) */
		if (st == ST_RUNNING && (xr < 0 || code == 128 + 9 || code == 128 + 15 || code < 0))
			ret = check_still_there(d, container, err);
		if (ret < 0) {
			/* reported as such, not as an exit status */
		} else if (xr == 0) {
			res->exit_code = code;
		} else if (st != ST_RUNNING) {
			res->exit_code = 128 + 9; /* killed with the container, or still dying */
		} else {
			ret = cae_error_set(err, e2.code, "%s", e2.message);
		}
		if ((res->timed_out || res->cancelled) && res->exit_code > 128 &&
		    res->exit_code < 128 + 65)
			res->term_signal = res->exit_code - 128;
	}
	if (ret == 0 && !spec->raw && !res->timed_out && !res->cancelled) {
		switch (run.hdr.status) {
		case CAE_WRAP_NOCWD:
			ret = cae_error_set(err, -ENOTDIR, "not a directory: %s", spec->cwd);
			break;
		case CAE_WRAP_OUTSIDE:
			ret = cae_error_set(err, -ENOTDIR,
					    "working directory is outside the workspace: %s",
					    spec->cwd);
			break;
		case CAE_WRAP_NOTFOUND:
			ret = cae_error_set(err, -ENOENT, "command not found: %s", spec->argv[0]);
			break;
		case CAE_WRAP_NONE: {
			/* The wrapper never ran: the engine's own error is on stdout. */
			size_t l;
			bool t;
			char *o = cae__capture_finish(&run.out, &l, &t);
			ret = cae_error_set(err, -EIO, "exec failed (exit %d): %.600s",
					    res->exit_code, o && *o ? o : "no output");
			free(o);
			break;
		}
		case CAE_WRAP_OK:
			break;
		}
	}
	res->duration_ms = res->duration_us / 1000;
	res->out_total = run.out.total;
	res->err_total = run.err.total;
	res->out = cae__capture_finish(&run.out, &res->out_len, &res->out_truncated);
	res->err = cae__capture_finish(&run.err, &res->err_len, &res->err_truncated);
	cae__capture_clear(&run.out);
	cae__capture_clear(&run.err);
	if (ret == 0 && (!res->out || !res->err))
		ret = cae_error_set(err, -ENOMEM, "out of memory");
	if (ret < 0)
		cae_run_result_clear(res);
	return ret;
}

/* ---- attached streams (cae_docker_attach) ----
 * One exec whose stdin and stdout stay open: the hijacked connection is used with plain
 * send/recv on its socket (no TLS on the engine's socket; curl's own calls are not safe from
 * two threads at once), so that one thread may read while others write. */

#define STREAM_READ_CHUNK (64 * 1024)
#define STREAM_STDERR_KEEP 4096

struct cae_docker_stream {
	cae_docker_conn conn;
	cae_buf early; /* stream bytes that came with the response head */
	size_t early_off;
	cae_docker_demux dm;
	cae_buf out; /* demultiplexed stdout not yet returned */
	size_t out_off;
	char errtail[STREAM_STDERR_KEEP]; /* the last of the program's stderr */
	size_t errlen;
};

static int stream_frame(void *ud, int stream, const char *p, size_t n)
{
	cae_docker_stream *s = ud;
	if (stream == 1)
		return cae__buf_append(&s->out, p, n);
	if (stream == 2) {
		if (n >= sizeof(s->errtail) - 1) {
			p += n - (sizeof(s->errtail) - 1);
			n = sizeof(s->errtail) - 1;
		}
		if (s->errlen + n >= sizeof(s->errtail)) {
			size_t drop = s->errlen + n - (sizeof(s->errtail) - 1);
			memmove(s->errtail, s->errtail + drop, s->errlen - drop);
			s->errlen -= drop;
		}
		memcpy(s->errtail + s->errlen, p, n);
		s->errlen += n;
		s->errtail[s->errlen] = '\0';
	}
	return 0;
}

int cae_docker_attach(cae_docker *d, const char *container, const char *const *argv,
		      const char *user, int64_t timeout_ms, cae_docker_stream **out, cae_error *err)
{
	cae_docker_exec_spec spec = {.argv = argv, .user = user, .cancel_fd = -1, .raw = true};
	char exec_id[80];
	int r;
	for (int tries = 0;; tries++) {
		r = exec_create(d, container, &spec, true, exec_id, sizeof(exec_id), err);
		if (r != -EAGAIN || tries >= PAUSED_TRIES || !wait_unpaused(d, container, err))
			break;
	}
	if (r < 0)
		return r;
	cae_docker_stream *s = calloc(1, sizeof(*s));
	if (!s)
		return cae_error_set(err, -ENOMEM, "out of memory");
	s->conn.sock = CURL_SOCKET_BAD;
	cae__buf_init(&s->early, HEAD_MAX + READ_CHUNK);
	cae__buf_init(&s->out, SIZE_MAX);
	cae__docker_demux_init(&s->dm);
	r = exec_start(d, exec_id, &s->conn, &s->early, timeout_ms, err);
	if (r < 0) {
		cae_docker_stream_close(s);
		return r;
	}
	*out = s;
	return 0;
}

int cae_docker_stream_fd(const cae_docker_stream *s)
{
	return (int)s->conn.sock;
}

ssize_t cae_docker_stream_read(cae_docker_stream *s, char *buf, size_t size)
{
	for (;;) {
		if (s->out_off < s->out.len) {
			size_t n = MIN(size, s->out.len - s->out_off);
			memcpy(buf, s->out.data + s->out_off, n);
			s->out_off += n;
			if (s->out_off == s->out.len) {
				s->out.len = 0;
				s->out_off = 0;
			}
			return (ssize_t)n;
		}
		char raw[STREAM_READ_CHUNK];
		size_t got;
		if (s->early_off < s->early.len) {
			got = MIN(sizeof(raw), s->early.len - s->early_off);
			memcpy(raw, s->early.data + s->early_off, got);
			s->early_off += got;
		} else {
			ssize_t k = recv(s->conn.sock, raw, sizeof(raw), 0);
			if (k < 0)
				return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : -errno;
			if (k == 0)
				return 0;
			got = (size_t)k;
		}
		int r = cae__docker_demux_feed(&s->dm, raw, got, stream_frame, s);
		if (r < 0)
			return r;
	}
}

int cae_docker_stream_write(cae_docker_stream *s, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = send(s->conn.sock, c, n, MSG_NOSIGNAL);
		if (w > 0) {
			c += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd pfd = {.fd = s->conn.sock, .events = POLLOUT};
			if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
				return -errno;
			continue;
		}
		return w < 0 ? -errno : -EIO;
	}
	return 0;
}

const char *cae_docker_stream_stderr(const cae_docker_stream *s)
{
	return s->errtail;
}

void cae_docker_stream_close(cae_docker_stream *s)
{
	if (!s)
		return;
	conn_close(&s->conn);
	cae__buf_clear(&s->early);
	cae__buf_clear(&s->out);
	free(s);
}
