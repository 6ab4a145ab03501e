/* The MCP server driven over a socketpair with a fake tool handler: negotiation, tools,
 * prompts and instructions (the system-prompt sections), errors, progress, cancellation,
 * concurrency, batches and robustness. */
#include "cae/jsonrpc.h"
#include "cae/mcp.h"
#include "cae/prompt.h"
#include "cae/session.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

/* ---- the fake handler ---------------------------------------------------------------- */

static int release_pipe[2] = {-1, -1};	/* readable: "slow" returns normally */
static int observed_pipe[2] = {-1, -1}; /* "slow" writes 'C' when it saw its cancel fd */
static int entered_pipe[2] = {-1, -1};	/* "slow" writes 'E' when it starts */
static atomic_int list_calls;

static json_t *fake_list(void *ud, bool with_output_schema)
{
	(void)ud;
	atomic_fetch_add(&list_calls, 1);
	json_t *tools = json_array();
	const char *names[] = {"echo", "fail", "slow", "progress", "sleep"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		json_t *t = json_pack("{s:s, s:s, s:{s:s, s:{s:{s:s}}}}", "name", names[i],
				      "description", "a test tool", "inputSchema", "type", "object",
				      "properties", "text", "type", "string");
		if (with_output_schema)
			json_object_set_new(t, "outputSchema",
					    json_pack("{s:s}", "type", "object"));
		json_array_append_new(tools, t);
	}
	return tools;
}

static int fake_call(void *ud, const char *name, json_t *args, const cae_call_ctx *ctx,
		     cae_tool_result *res, cae_error *err)
{
	(void)ud;
	ck_assert(json_is_object(args));
	ck_assert(ctx->cancel_fd >= 0);
	if (strcmp(name, "echo") == 0) {
		json_t *text = json_object_get(args, "text");
		if (!json_is_string(text))
			return cae_error_set(err, -EINVAL, "\"text\" must be a string");
		res->text = strdup(json_string_value(text));
		res->structured = json_pack("{s:O}", "text", text);
		return 0;
	}
	if (strcmp(name, "fail") == 0) {
		res->text = strdup("boom");
		res->structured = json_pack("{s:s}", "error", "boom");
		res->is_error = true;
		return 0;
	}
	if (strcmp(name, "progress") == 0) {
		if (ctx->progress) {
			ctx->progress(ctx->progress_userdata, 1, 3, "cloning");
			ctx->progress(ctx->progress_userdata, 2, 3, "installing");
			ctx->progress(ctx->progress_userdata, 2, 3, "not increasing: dropped");
			ctx->progress(ctx->progress_userdata, 3, 3, NULL);
		}
		res->text = strdup("prepared");
		return 0;
	}
	if (strcmp(name, "sleep") == 0) {
		usleep(100 * 1000);
		res->text = strdup("slept");
		return 0;
	}
	if (strcmp(name, "slow") == 0) {
		ck_assert_int_eq(write(entered_pipe[1], "E", 1), 1);
		struct pollfd p[2] = {{.fd = ctx->cancel_fd, .events = POLLIN},
				      {.fd = release_pipe[0], .events = POLLIN}};
		int r = poll(p, 2, 20000);
		ck_assert_int_gt(r, 0);
		if (p[0].revents & POLLIN) {
			ck_assert_int_eq(write(observed_pipe[1], "C", 1), 1);
			return cae_error_set(err, -ECANCELED, "cancelled");
		}
		char c;
		ck_assert_int_eq(read(release_pipe[0], &c, 1), 1);
		res->text = strdup("released");
		return 0;
	}
	return cae_error_set(err, -ENOENT, "no tool named %s", name);
}

static const cae_mcp_handler handler = {fake_list, fake_call, NULL};

/* The same tools plus "quick", which the handler declares quick (run on the reader thread):
 * it echoes "text", reports progress when "progress" is true, and records where it ran. */
static pthread_t quick_thread;
static bool quick_had_cancel_fd;

static bool fake_is_quick(void *ud, const char *name, const json_t *args)
{
	(void)ud;
	(void)args;
	return strcmp(name, "quick") == 0;
}

static int quick_call(void *ud, const char *name, json_t *args, const cae_call_ctx *ctx,
		      cae_tool_result *res, cae_error *err)
{
	if (strcmp(name, "quick") != 0)
		return fake_call(ud, name, args, ctx, res, err);
	quick_thread = pthread_self();
	quick_had_cancel_fd = ctx->cancel_fd >= 0;
	if (json_is_true(json_object_get(args, "progress")) && ctx->progress)
		ctx->progress(ctx->progress_userdata, 1, 2, "half way");
	json_t *text = json_object_get(args, "text");
	res->text = strdup(json_is_string(text) ? json_string_value(text) : "");
	res->structured = json_pack("{s:s}", "text", res->text);
	return 0;
}

static const cae_mcp_handler quick_handler = {fake_list, quick_call, NULL, fake_is_quick};

/* ---- the client side ----------------------------------------------------------------- */

struct client {
	const cae_mcp_handler *h;
	int fd;	       /* the test's end */
	int server_fd; /* the server's end */
	pthread_t thread;
	cae_mcp_options opts;
	int result;
	bool running;
	char buf[1 << 16];
	size_t len;
};

static void *serve_thread(void *arg)
{
	struct client *c = arg;
	cae_error err = {0};
	c->result = cae_mcp_serve(c->h, c->server_fd, c->server_fd, &c->opts, &err);
	return NULL;
}

static void client_start_with(struct client *c, const cae_mcp_options *opts,
			      const cae_mcp_handler *h)
{
	memset(c, 0, sizeof(*c));
	c->h = h;
	if (opts)
		c->opts = *opts;
	else
		c->opts.shutdown_fd = -1;
	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	c->fd = sv[0];
	c->server_fd = sv[1];
	ck_assert_int_eq(pipe2(release_pipe, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(observed_pipe, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(entered_pipe, O_CLOEXEC), 0);
	ck_assert_int_eq(pthread_create(&c->thread, NULL, serve_thread, c), 0);
	c->running = true;
}

static void client_start(struct client *c, const cae_mcp_options *opts)
{
	client_start_with(c, opts, &handler);
}

static void client_send(struct client *c, const char *s)
{
	size_t n = strlen(s);
	ck_assert_int_eq(write(c->fd, s, n), (ssize_t)n);
}

/* The next line from the server (NULL when the server closed or the time ran out). */
static char *client_line(struct client *c, int timeout_ms)
{
	for (;;) {
		char *nl = memchr(c->buf, '\n', c->len);
		if (nl) {
			size_t n = (size_t)(nl - c->buf);
			char *line = strndup(c->buf, n);
			memmove(c->buf, nl + 1, c->len - n - 1);
			c->len -= n + 1;
			return line;
		}
		struct pollfd p = {.fd = c->fd, .events = POLLIN};
		if (poll(&p, 1, timeout_ms) <= 0)
			return NULL;
		ck_assert_uint_lt(c->len, sizeof(c->buf));
		ssize_t k = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
		if (k <= 0)
			return NULL;
		c->len += (size_t)k;
	}
}

static json_t *client_recv(struct client *c)
{
	char *line = client_line(c, 10000);
	ck_assert_msg(line != NULL, "no message from the server");
	json_error_t je;
	json_t *v = json_loads(line, 0, &je);
	ck_assert_msg(v != NULL, "server wrote a line that is not JSON: %s", line);
	free(line);
	return v;
}

static void close_fds(struct client *c)
{
	close(c->server_fd);
	close(c->fd);
	int *fds[] = {release_pipe, observed_pipe, entered_pipe};
	for (size_t i = 0; i < 3; i++) {
		close(fds[i][0]);
		close(fds[i][1]);
	}
}

/* Ends the session: end of input, the server drains and returns. */
static void client_stop(struct client *c)
{
	if (!c->running)
		return;
	shutdown(c->fd, SHUT_WR);
	pthread_join(c->thread, NULL);
	c->running = false;
	close_fds(c);
}

/* End of input; once the server returned, its end is closed so that the test reads
 * everything it wrote and then end of file. */
static void client_finish(struct client *c)
{
	shutdown(c->fd, SHUT_WR);
	pthread_join(c->thread, NULL);
	c->running = false;
	close(c->server_fd);
	c->server_fd = -1;
}

/* Waits until the "slow" tool has started. */
static void wait_entered(void)
{
	struct pollfd p = {.fd = entered_pipe[0], .events = POLLIN};
	ck_assert_int_eq(poll(&p, 1, 10000), 1);
	char ch;
	ck_assert_int_eq(read(entered_pipe[0], &ch, 1), 1);
	ck_assert_int_eq(ch, 'E');
}

static json_t *request(struct client *c, const char *line)
{
	client_send(c, line);
	return client_recv(c);
}

static void initialize(struct client *c, const char *version)
{
	char msg[256];
	snprintf(msg, sizeof(msg),
		 "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{"
		 "\"protocolVersion\":\"%s\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\","
		 "\"version\":\"1\"}}}\n",
		 version);
	json_t *r = request(c, msg);
	ck_assert_str_eq(
	    json_string_value(json_object_get(json_object_get(r, "result"), "protocolVersion")),
	    version);
	json_decref(r);
	client_send(c, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
}

static json_int_t error_code(json_t *r)
{
	json_t *e = json_object_get(r, "error");
	ck_assert_msg(json_is_object(e), "expected an error");
	return json_integer_value(json_object_get(e, "code"));
}

static json_t *result_of(json_t *r)
{
	json_t *res = json_object_get(r, "result");
	ck_assert_msg(json_is_object(res), "expected a result");
	return res;
}

/* ---- tests --------------------------------------------------------------------------- */

START_TEST(initialize_negotiates_versions)
{
	struct client c;
	const char *ours[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};
	for (size_t i = 0; i < 4; i++) {
		client_start(&c, NULL);
		char msg[256];
		snprintf(msg, sizeof(msg),
			 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
			 "\"protocolVersion\":\"%s\",\"capabilities\":{},\"clientInfo\":{}}}\n",
			 ours[i]);
		json_t *r = request(&c, msg);
		json_t *res = result_of(r);
		ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 1);
		ck_assert_str_eq(json_string_value(json_object_get(res, "protocolVersion")),
				 ours[i]);
		json_t *tools = json_object_get(json_object_get(res, "capabilities"), "tools");
		ck_assert(json_is_false(json_object_get(tools, "listChanged")));
		ck_assert_str_eq(
		    json_string_value(json_object_get(json_object_get(res, "serverInfo"), "name")),
		    "cae");
		json_decref(r);
		client_stop(&c);
	}
	/* A version we do not speak: we answer with our latest. */
	client_start(&c, NULL);
	json_t *r =
	    request(&c, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":{"
			"\"protocolVersion\":\"1999-01-01\",\"capabilities\":{}}}\n");
	ck_assert_str_eq(json_string_value(json_object_get(result_of(r), "protocolVersion")),
			 CAE_MCP_PROTOCOL_LATEST);
	json_decref(r);
	/* No version at all: invalid params. */
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"initialize\",\"params\":{}}\n");
	ck_assert_int_eq(error_code(r), CAE_JSONRPC_INVALID_PARAMS);
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 3);
	json_decref(r);
	client_stop(&c);
	ck_assert_int_eq(c.result, 0);
}
END_TEST

START_TEST(tools_list_output_schema_by_version)
{
	const char *versions[] = {"2025-06-18", "2025-03-26", "2024-11-05"};
	for (size_t i = 0; i < 3; i++) {
		struct client c;
		client_start(&c, NULL);
		initialize(&c, versions[i]);
		json_t *r =
		    request(&c, "{\"jsonrpc\":\"2.0\",\"id\":\"l\",\"method\":\"tools/list\"}\n");
		json_t *tools = json_object_get(result_of(r), "tools");
		ck_assert_uint_eq(json_array_size(tools), 5);
		json_t *t = json_array_get(tools, 0);
		ck_assert_str_eq(json_string_value(json_object_get(t, "name")), "echo");
		ck_assert(json_is_object(json_object_get(t, "inputSchema")));
		ck_assert_int_eq(json_object_get(t, "outputSchema") != NULL, i == 0);
		json_decref(r);
		/* A cursor we never gave is refused. */
		r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\","
				"\"params\":{\"cursor\":\"x\"}}\n");
		ck_assert_int_eq(error_code(r), CAE_JSONRPC_INVALID_PARAMS);
		json_decref(r);
		client_stop(&c);
	}
}
END_TEST

START_TEST(tools_call_results_and_errors)
{
	struct client c;
	client_start(&c, NULL);
	initialize(&c, "2025-06-18");
	json_t *r =
	    request(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"echo\",\"arguments\":{\"text\":\"h\\u00e9llo\\nworld\"}}}\n");
	json_t *res = result_of(r);
	json_t *item = json_array_get(json_object_get(res, "content"), 0);
	ck_assert_str_eq(json_string_value(json_object_get(item, "type")), "text");
	ck_assert_str_eq(json_string_value(json_object_get(item, "text")), "h\xc3\xa9llo\nworld");
	ck_assert_str_eq(
	    json_string_value(json_object_get(json_object_get(res, "structuredContent"), "text")),
	    "h\xc3\xa9llo\nworld");
	ck_assert(json_is_false(json_object_get(res, "isError")));
	json_decref(r);

	/* A tool failure is a result with isError. */
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"fail\",\"arguments\":{}}}\n");
	res = result_of(r);
	ck_assert(json_is_true(json_object_get(res, "isError")));
	ck_assert_ptr_null(json_object_get(res, "structuredContent"));
	ck_assert_str_eq(json_string_value(json_object_get(
			     json_array_get(json_object_get(res, "content"), 0), "text")),
			 "boom");
	json_decref(r);

	/* Protocol failures are JSON-RPC errors. */
	const char *bad[] = {
	    "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":"
	    "{\"name\":\"nope\",\"arguments\":{}}}\n",
	    "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":"
	    "{\"name\":\"echo\",\"arguments\":{\"text\":5}}}\n",
	    "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":"
	    "{\"name\":\"echo\",\"arguments\":[1]}}\n",
	    "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/"
	    "call\",\"params\":{\"arguments\":{}}}\n",
	    "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\"}\n",
	    "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":[\"echo\"]}\n",
	    "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":"
	    "{\"name\":\"echo\",\"_meta\":{\"progressToken\":{}}}}\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		r = request(&c, bad[i]);
		ck_assert_msg(error_code(r) == CAE_JSONRPC_INVALID_PARAMS, "%s", bad[i]);
		ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 3);
		json_decref(r);
	}
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"nope\"}}\n");
	ck_assert(strstr(json_string_value(json_object_get(json_object_get(r, "error"), "message")),
			 "Unknown tool: nope") != NULL);
	json_decref(r);
	client_stop(&c);
}
END_TEST

START_TEST(structured_content_only_where_the_version_has_it)
{
	struct client c;
	client_start(&c, NULL);
	initialize(&c, "2024-11-05");
	json_t *r =
	    request(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"echo\",\"arguments\":{\"text\":\"x\"}}}\n");
	ck_assert_ptr_null(json_object_get(result_of(r), "structuredContent"));
	json_decref(r);
	client_stop(&c);
}
END_TEST

START_TEST(ping_unknown_methods_and_notifications)
{
	struct client c;
	client_start(&c, NULL);
	/* ping works even before initialize */
	json_t *r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}\n");
	ck_assert_uint_eq(json_object_size(result_of(r)), 0);
	ck_assert_str_eq(json_string_value(json_object_get(r, "id")), "p");
	json_decref(r);
	initialize(&c, "2025-06-18");
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"resources/list\"}\n");
	ck_assert_int_eq(error_code(r), CAE_JSONRPC_METHOD_NOT_FOUND);
	json_decref(r);
	/* Notifications, known or not, and responses to nothing are never answered: the
	 * next line is the answer to the ping after them. */
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/whatever\"}\n");
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
			"\"params\":{\"requestId\":12345}}\n");
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":77,\"result\":{}}\n");
	client_send(&c,
		    "{\"jsonrpc\":\"2.0\",\"id\":78,\"error\":{\"code\":1,\"message\":\"m\"}}\n");
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ping\",\"params\":{}}\n");
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 6);
	ck_assert_ptr_nonnull(json_object_get(r, "result"));
	json_decref(r);
	client_stop(&c);
	ck_assert_int_eq(c.result, 0);
}
END_TEST

static void check_progress(const char *version, bool with_message)
{
	struct client c;
	client_start(&c, NULL);
	initialize(&c, version);
	client_send(
	    &c,
	    "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":"
	    "{\"name\":\"progress\",\"arguments\":{},\"_meta\":{\"progressToken\":\"tok\"}}}\n");
	double expect[] = {1, 2, 3};
	for (int i = 0; i < 3; i++) {
		json_t *n = client_recv(&c);
		ck_assert_str_eq(json_string_value(json_object_get(n, "method")),
				 "notifications/progress");
		ck_assert_ptr_null(json_object_get(n, "id"));
		json_t *p = json_object_get(n, "params");
		ck_assert_str_eq(json_string_value(json_object_get(p, "progressToken")), "tok");
		ck_assert(json_number_value(json_object_get(p, "progress")) == expect[i]);
		ck_assert(json_number_value(json_object_get(p, "total")) == 3);
		if (with_message && i < 2)
			ck_assert_str_eq(json_string_value(json_object_get(p, "message")),
					 i == 0 ? "cloning" : "installing");
		else
			ck_assert_ptr_null(json_object_get(p, "message"));
		json_decref(n);
	}
	json_t *r = client_recv(&c);
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 9);
	ck_assert_ptr_nonnull(json_object_get(r, "result"));
	json_decref(r);

	/* Without a progress token: no notifications, just the answer. */
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"progress\",\"arguments\":{}}}\n");
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 10);
	ck_assert_ptr_nonnull(json_object_get(r, "result"));
	json_decref(r);
	client_stop(&c);
}

START_TEST(progress_notifications)
{
	check_progress("2025-06-18", true);
	check_progress("2024-11-05", false);
}
END_TEST

/* A call that reports nothing still keeps its client alive: progress notifications from
 * the server while it runs (at least every 10 s; the server sends one after 5 s of silence),
 * increasing, a little above the tool's last value, and none after the answer. */
START_TEST(keepalive_progress_for_silent_calls)
{
	struct client c;
	client_start(&c, NULL);
	initialize(&c, "2025-06-18");
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":30,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"slow\",\"arguments\":{},\"_meta\":{\"progressToken\":7}}}\n");
	wait_entered();
	double last = 0;
	for (int i = 0; i < 2; i++) {
		json_t *n = client_recv(&c);
		ck_assert_str_eq(json_string_value(json_object_get(n, "method")),
				 "notifications/progress");
		json_t *p = json_object_get(n, "params");
		ck_assert_int_eq(json_integer_value(json_object_get(p, "progressToken")), 7);
		double v = json_number_value(json_object_get(p, "progress"));
		ck_assert_msg(v > last && v < 1, "progress %f after %f", v, last);
		last = v;
		ck_assert_ptr_nonnull(
		    strstr(json_string_value(json_object_get(p, "message")), "still running"));
		json_decref(n);
	}
	ck_assert_int_eq(write(release_pipe[1], "r", 1), 1);
	json_t *r = client_recv(&c);
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 30);
	ck_assert_ptr_nonnull(json_object_get(r, "result"));
	json_decref(r);
	/* nothing after the answer */
	client_finish(&c);
	ck_assert_ptr_null(client_line(&c, 1000));
	close_fds(&c);
	ck_assert_int_eq(c.result, 0);
}
END_TEST

START_TEST(cancellation_signals_the_call)
{
	struct client c;
	client_start(&c, NULL);
	initialize(&c, "2025-06-18");
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"slow\",\"arguments\":{}}}\n");
	/* The call is running when ping is answered... */
	json_t *r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"ping\"}\n");
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 11);
	json_decref(r);
	wait_entered();
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
			"\"params\":{\"requestId\":10,\"reason\":\"user\"}}\n");
	/* ...and the handler sees its cancel fd become readable. */
	struct pollfd p = {.fd = observed_pipe[0], .events = POLLIN};
	ck_assert_int_eq(poll(&p, 1, 10000), 1);
	char ch;
	ck_assert_int_eq(read(observed_pipe[0], &ch, 1), 1);
	ck_assert_int_eq(ch, 'C');
	/* No answer for the cancelled request: the next line is the next ping's answer. */
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"ping\"}\n");
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 12);
	json_decref(r);
	/* The call returned: the server ends cleanly at end of input, having written nothing
	 * more. */
	client_finish(&c);
	ck_assert_ptr_null(client_line(&c, 10000));
	close_fds(&c);
	ck_assert_int_eq(c.result, 0);
}
END_TEST

START_TEST(requests_answered_during_a_slow_call)
{
	struct client c;
	client_start(&c, NULL);
	initialize(&c, "2025-06-18");
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":20,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"slow\",\"arguments\":{}}}\n");
	json_t *r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":21,\"method\":\"ping\"}\n");
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 21);
	json_decref(r);
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":22,\"method\":\"tools/list\"}\n");
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 22);
	json_decref(r);
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":23,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"echo\",\"arguments\":{\"text\":\"meanwhile\"}}}\n");
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 23);
	json_decref(r);
	/* The same id again while it runs is refused. */
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":20,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"echo\",\"arguments\":{\"text\":\"dup\"}}}\n");
	ck_assert_int_eq(error_code(r), CAE_JSONRPC_INVALID_REQUEST);
	json_decref(r);
	ck_assert_int_eq(write(release_pipe[1], "r", 1), 1);
	r = client_recv(&c);
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 20);
	ck_assert_str_eq(json_string_value(json_object_get(
			     json_array_get(json_object_get(result_of(r), "content"), 0), "text")),
			 "released");
	json_decref(r);
	client_stop(&c);
}
END_TEST

START_TEST(back_to_back_requests_run_side_by_side)
{
	struct client c;
	client_start(&c, NULL);
	initialize(&c, "2025-06-18");
	/* One worker exists and is idle after this call. */
	json_t *r =
	    request(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"echo\",\"arguments\":{\"text\":\"warm\"}}}\n");
	json_decref(r);
	/* A slow call and a list in one write: the list must not wait behind the slow call
	 * for the one idle worker. */
	for (int round = 0; round < 20; round++) {
		char msg[512];
		snprintf(msg, sizeof(msg),
			 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":"
			 "{\"name\":\"slow\",\"arguments\":{}}}\n"
			 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/list\"}\n",
			 100 + 2 * round, 101 + 2 * round);
		client_send(&c, msg);
		r = client_recv(&c);
		ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 101 + 2 * round);
		json_decref(r);
		ck_assert_int_eq(write(release_pipe[1], "r", 1), 1);
		r = client_recv(&c);
		ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 100 + 2 * round);
		json_decref(r);
	}
	client_stop(&c);
}
END_TEST

START_TEST(bounded_calls_and_queue)
{
	cae_mcp_options o = {.max_calls = 1, .max_queued = 1, .shutdown_fd = -1};
	struct client c;
	client_start(&c, &o);
	initialize(&c, "2025-06-18");
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"slow\",\"arguments\":{}}}\n");
	/* once the first runs on the only worker, the next one waits in the queue */
	wait_entered();
	json_t *r;
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"echo\",\"arguments\":{\"text\":\"queued\"}}}\n");
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"echo\",\"arguments\":{\"text\":\"too many\"}}}\n");
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 3);
	ck_assert_int_eq(error_code(r), CAE_JSONRPC_SERVER_BUSY);
	json_decref(r);
	/* Cancelling the queued one drops it without an answer. */
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
			"\"params\":{\"requestId\":2}}\n");
	/* (a ping answered means the reader handled the cancellation before the release) */
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":\"sync\",\"method\":\"ping\"}\n");
	json_decref(r);
	ck_assert_int_eq(write(release_pipe[1], "r", 1), 1);
	r = client_recv(&c);
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 1);
	json_decref(r);
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}\n");
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 4);
	json_decref(r);
	client_stop(&c);
}
END_TEST

START_TEST(survives_garbage)
{
	cae_mcp_options o = {.max_message_size = 1024, .max_depth = 32, .shutdown_fd = -1};
	struct client c;
	client_start(&c, &o);
	initialize(&c, "2025-06-18");
	struct {
		const char *line;
		json_int_t code;
	} cases[] = {
	    {"garbage\n", CAE_JSONRPC_PARSE_ERROR},
	    {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"pi\n", CAE_JSONRPC_PARSE_ERROR},
	    {"\x01\x02\xff\xfe}{\n", CAE_JSONRPC_PARSE_ERROR},
	    {"\"str\"\n", CAE_JSONRPC_INVALID_REQUEST},
	    {"{\"jsonrpc\":\"2.0\"}\n", CAE_JSONRPC_INVALID_REQUEST},
	    {"[1,2]\n", CAE_JSONRPC_INVALID_REQUEST}, /* no batches in 2025-06-18 */
	    {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":[]}\n",
	     CAE_JSONRPC_INVALID_PARAMS},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *r = request(&c, cases[i].line);
		ck_assert_msg(error_code(r) == cases[i].code, "%s", cases[i].line);
		json_decref(r);
	}
	/* A wrong version with a valid id is answered with that id. */
	json_t *r = request(&c, "{\"jsonrpc\":\"1.0\",\"id\":42,\"method\":\"ping\"}\n");
	ck_assert_int_eq(error_code(r), CAE_JSONRPC_INVALID_REQUEST);
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 42);
	json_decref(r);
	/* Oversized: one error carrying the request's id, read from the line as it was
	 * skipped (wherever the id stands), then the stream goes on. */
	static const struct {
		const char *head, *tail, *want_id; /* want_id: its JSON text, NULL: null */
	} bigs[] = {
	    {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"pad\":\"", "\"}}",
	     "1"},
	    {"{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{\"id\":5,\"pad\":\"",
	     "\"}, \"id\" : \"call-\\\"7\\\"\"}", "\"call-\\\"7\\\"\""},
	    {"{\"jsonrpc\":\"2.0\",\"method\":\"ping\",\"params\":{\"x\":[{\"id\":3}],\"pad\":\"",
	     "\"}}", NULL},
	    {"{\"jsonrpc\":\"2.0\",\"i\\u0064\":4,\"params\":{\"pad\":\"", "\"}}", NULL},
	    {"{\"jsonrpc\":\"2.0\",\"id\":-12,\"params\":{\"pad\":\"", "\"}}", "-12"},
	    {"{\"jsonrpc\":\"2.0\",\"id\":{\"a\":1},\"params\":{\"pad\":\"", "\"}}", NULL},
	    {"[{\"jsonrpc\":\"2.0\",\"id\":6,\"params\":{\"pad\":\"", "\"}}]", NULL},
	};
	for (size_t i = 0; i < sizeof(bigs) / sizeof(bigs[0]); i++) {
		char big[5000];
		size_t hl = strlen(bigs[i].head), tl = strlen(bigs[i].tail);
		memset(big, 'x', sizeof(big));
		memcpy(big, bigs[i].head, hl);
		memcpy(big + sizeof(big) - 2 - tl, bigs[i].tail, tl);
		big[sizeof(big) - 2] = '\n';
		big[sizeof(big) - 1] = '\0';
		r = request(&c, big);
		ck_assert_int_eq(error_code(r), CAE_JSONRPC_INVALID_REQUEST);
		json_t *id = json_object_get(r, "id");
		if (bigs[i].want_id) {
			char *got = json_dumps(id, JSON_ENCODE_ANY);
			ck_assert_msg(got && strcmp(got, bigs[i].want_id) == 0, "case %zu: id %s",
				      i, got ? got : "(none)");
			free(got);
		} else {
			ck_assert_msg(json_is_null(id), "case %zu", i);
		}
		json_decref(r);
	}
	/* Deeply nested: refused. */
	char deep[3000];
	size_t n = 0;
	for (int i = 0; i < 1000; i++)
		deep[n++] = '[';
	for (int i = 0; i < 1000; i++)
		deep[n++] = ']';
	deep[n++] = '\n';
	deep[n] = '\0';
	r = request(&c, deep);
	ck_assert_int_eq(error_code(r), CAE_JSONRPC_INVALID_REQUEST);
	json_decref(r);
	/* Still serving. */
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"ping\"}\n");
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 99);
	json_decref(r);
	/* A truncated last message at end of input gets its error too. */
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":100,\"meth");
	shutdown(c.fd, SHUT_WR);
	r = client_recv(&c);
	ck_assert_int_eq(error_code(r), CAE_JSONRPC_PARSE_ERROR);
	json_decref(r);
	client_stop(&c);
	ck_assert_int_eq(c.result, 0);
}
END_TEST

START_TEST(batches_under_older_versions)
{
	struct client c;
	client_start(&c, NULL);
	initialize(&c, "2025-03-26");
	json_t *r =
	    request(&c, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"},"
			"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"},"
			"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"echo\",\"arguments\":{\"text\":\"b\"}}},"
			"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\"},"
			"5]\n");
	ck_assert(json_is_array(r));
	ck_assert_uint_eq(json_array_size(r), 4);
	int seen = 0;
	size_t i;
	json_t *m;
	json_array_foreach(r, i, m)
	{
		json_t *id = json_object_get(m, "id");
		if (json_is_null(id)) {
			ck_assert_int_eq(error_code(m), CAE_JSONRPC_INVALID_REQUEST);
			seen |= 1;
		} else if (json_integer_value(id) == 1) {
			seen |= 2;
		} else if (json_integer_value(id) == 2) {
			ck_assert_ptr_null(json_object_get(result_of(m), "structuredContent"));
			seen |= 4;
		} else if (json_integer_value(id) == 4) {
			ck_assert_ptr_nonnull(json_object_get(result_of(m), "tools"));
			seen |= 8;
		}
	}
	ck_assert_int_eq(seen, 15);
	json_decref(r);
	r = request(&c, "[]\n");
	ck_assert(json_is_object(r));
	ck_assert_int_eq(error_code(r), CAE_JSONRPC_INVALID_REQUEST);
	json_decref(r);
	/* A batch of notifications only: nothing comes back. */
	client_send(&c, "[{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"}]\n");
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}\n");
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 7);
	json_decref(r);
	/* initialize inside a batch is refused */
	r = request(&c, "[{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"initialize\",\"params\":"
			"{\"protocolVersion\":\"2025-03-26\"}}]\n");
	ck_assert_int_eq(error_code(json_array_get(r, 0)), CAE_JSONRPC_INVALID_REQUEST);
	json_decref(r);
	client_stop(&c);
}
END_TEST

START_TEST(end_of_input_cancels_running_calls)
{
	struct client c;
	client_start(&c, NULL);
	initialize(&c, "2025-06-18");
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"slow\",\"arguments\":{}}}\n");
	wait_entered();
	/* The client closes its end: the running call sees its cancellation at once (the
	 * fake tool would otherwise wait 20 s for its release pipe), gets no answer, and the
	 * server returns. */
	client_finish(&c);
	char ch;
	ck_assert_int_eq(read(observed_pipe[0], &ch, 1), 1);
	ck_assert_int_eq(ch, 'C');
	ck_assert_ptr_null(client_line(&c, 10000));
	close_fds(&c);
	ck_assert_int_eq(c.result, 0);
}
END_TEST

START_TEST(requests_before_initialize_are_refused)
{
	struct client c;
	client_start(&c, NULL);
	const char *early[] = {
	    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
	    "{\"name\":\"echo\",\"arguments\":{\"text\":\"x\"}}}\n",
	    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n",
	    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/list\"}\n",
	};
	for (size_t i = 0; i < 3; i++) {
		json_t *r = request(&c, early[i]);
		ck_assert_int_eq(error_code(r), CAE_JSONRPC_SERVER_NOT_INITIALIZED);
		ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 1);
		json_decref(r);
	}
	/* an initialize the server refused leaves it uninitialized */
	json_t *r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\","
				"\"params\":{\"protocolVersion\":5}}\n");
	ck_assert_ptr_nonnull(json_object_get(r, "error"));
	json_decref(r);
	r = request(&c, early[0]);
	ck_assert_int_eq(error_code(r), CAE_JSONRPC_SERVER_NOT_INITIALIZED);
	json_decref(r);
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}\n");
	ck_assert_ptr_nonnull(json_object_get(r, "result"));
	json_decref(r);
	initialize(&c, "2025-06-18");
	r = request(&c, early[0]);
	ck_assert_str_eq(json_string_value(json_object_get(
			     json_array_get(json_object_get(result_of(r), "content"), 0), "text")),
			 "x");
	json_decref(r);
	client_stop(&c);
	ck_assert_int_eq(c.result, 0);
}
END_TEST

START_TEST(ids_beyond_int64_are_answered)
{
	struct client c;
	client_start(&c, NULL);
	initialize(&c, "2025-06-18");
	/* Each answer carries the id as the client wrote it (a string would not do: the SDKs
	 * match answers by value). */
	const char *ids[] = {"123456789012345678901234567890", "1e400", "-99999999999999999999"};
	for (size_t i = 0; i < 3; i++) {
		char msg[256], want[128];
		snprintf(msg, sizeof(msg),
			 "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"tools/call\",\"params\":"
			 "{\"name\":\"echo\",\"arguments\":{\"text\":\"big\"}}}\n",
			 ids[i]);
		client_send(&c, msg);
		char *line = client_line(&c, 10000);
		ck_assert_ptr_nonnull(line);
		snprintf(want, sizeof(want), "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":", ids[i]);
		ck_assert_msg(strncmp(line, want, strlen(want)) == 0, "%s", line);
		free(line);
		/* an error answer too (unknown method) */
		snprintf(msg, sizeof(msg), "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"nope\"}\n",
			 ids[i]);
		client_send(&c, msg);
		line = client_line(&c, 10000);
		ck_assert_ptr_nonnull(line);
		snprintf(want, sizeof(want), "{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":", ids[i]);
		ck_assert_msg(strncmp(line, want, strlen(want)) == 0, "%s", line);
		free(line);
	}
	/* a running call with such an id can be cancelled by it */
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":1e999,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"slow\",\"arguments\":{}}}\n");
	wait_entered();
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
			"\"params\":{\"requestId\":1e999}}\n");
	char ch;
	ck_assert_int_eq(read(observed_pipe[0], &ch, 1), 1);
	ck_assert_int_eq(ch, 'C');
	client_stop(&c);
	ck_assert_int_eq(c.result, 0);
}
END_TEST

START_TEST(shutdown_fd_cancels_and_returns)
{
	int sd[2];
	ck_assert_int_eq(pipe2(sd, O_CLOEXEC), 0);
	cae_mcp_options o = {.shutdown_fd = sd[0]};
	struct client c;
	client_start(&c, &o);
	initialize(&c, "2025-06-18");
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"slow\",\"arguments\":{}}}\n");
	json_t *r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n");
	json_decref(r);
	wait_entered();
	ck_assert_int_eq(write(sd[1], "x", 1), 1);
	pthread_join(c.thread, NULL);
	c.running = false;
	ck_assert_int_eq(c.result, 0);
	char ch;
	ck_assert_int_eq(read(observed_pipe[0], &ch, 1), 1);
	ck_assert_int_eq(ch, 'C');
	close_fds(&c);
	close(sd[0]);
	close(sd[1]);
}
END_TEST

START_TEST(client_gone_is_an_error)
{
	struct client c;
	client_start(&c, NULL);
	/* The client sends a request and goes away completely. */
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"sleep\",\"arguments\":{}}}\n");
	close(c.fd);
	pthread_join(c.thread, NULL);
	ck_assert_int_eq(c.result, -EPIPE);
	c.fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	close_fds(&c);
}
END_TEST

static const char *text_of(json_t *r)
{
	return json_string_value(
	    json_object_get(json_array_get(json_object_get(result_of(r), "content"), 0), "text"));
}

START_TEST(quick_calls_run_on_the_reader)
{
	struct client c;
	client_start_with(&c, NULL, &quick_handler);
	initialize(&c, "2025-06-18");
	/* answered like any call, but on the serving thread and without a cancel fd */
	quick_had_cancel_fd = true;
	json_t *r =
	    request(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"quick\",\"arguments\":{\"text\":\"f\\u00e4st\"}}}\n");
	ck_assert_str_eq(text_of(r), "f\xc3\xa4st");
	ck_assert_str_eq(json_string_value(json_object_get(
			     json_object_get(result_of(r), "structuredContent"), "text")),
			 "f\xc3\xa4st");
	ck_assert(json_is_false(json_object_get(result_of(r), "isError")));
	json_decref(r);
	ck_assert(pthread_equal(quick_thread, c.thread));
	ck_assert(!quick_had_cancel_fd);

	/* its progress notifications come before its answer */
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"quick\",\"arguments\":{\"text\":\"p\",\"progress\":true},"
			"\"_meta\":{\"progressToken\":\"tok\"}}}\n");
	r = client_recv(&c);
	ck_assert_str_eq(json_string_value(json_object_get(r, "method")), "notifications/progress");
	json_t *params = json_object_get(r, "params");
	ck_assert_str_eq(json_string_value(json_object_get(params, "progressToken")), "tok");
	ck_assert_str_eq(json_string_value(json_object_get(params, "message")), "half way");
	json_decref(r);
	r = client_recv(&c);
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 2);
	ck_assert_str_eq(text_of(r), "p");
	json_decref(r);

	/* run in turn: a quick call and a ping written together are answered in that order */
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"quick\",\"arguments\":{\"text\":\"first\"}}}\n"
			"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}\n");
	r = client_recv(&c);
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 3);
	json_decref(r);
	r = client_recv(&c);
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 4);
	json_decref(r);

	/* while a slow call runs on a worker: a quick call is answered, and one that reuses the
	 * running call's id is refused */
	client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"slow\",\"arguments\":{}}}\n");
	wait_entered();
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"quick\",\"arguments\":{\"text\":\"dup\"}}}\n");
	ck_assert_int_eq(error_code(r), CAE_JSONRPC_INVALID_REQUEST);
	json_decref(r);
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"quick\",\"arguments\":{\"text\":\"meanwhile\"}}}\n");
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 6);
	ck_assert_str_eq(text_of(r), "meanwhile");
	json_decref(r);
	ck_assert_int_eq(write(release_pipe[1], "r", 1), 1);
	r = client_recv(&c);
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 5);
	ck_assert_str_eq(text_of(r), "released");
	json_decref(r);

	/* the other tools still run on workers, with a cancel fd (fake_call checks it) */
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"echo\",\"arguments\":{\"text\":\"w\"}}}\n");
	ck_assert_str_eq(text_of(r), "w");
	json_decref(r);
	client_stop(&c);
}
END_TEST

START_TEST(quick_calls_in_a_batch)
{
	struct client c;
	client_start_with(&c, NULL, &quick_handler);
	initialize(&c, "2025-03-26");
	json_t *r =
	    request(&c, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"quick\",\"arguments\":{\"text\":\"b\"}}},"
			"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":"
			"{\"name\":\"echo\",\"arguments\":{\"text\":\"e\"}}},"
			"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}]\n");
	ck_assert(json_is_array(r));
	ck_assert_uint_eq(json_array_size(r), 3);
	int seen = 0;
	size_t i;
	json_t *m;
	json_array_foreach(r, i, m)
	{
		json_int_t id = json_integer_value(json_object_get(m, "id"));
		if (id == 1) {
			ck_assert_str_eq(text_of(m), "b");
			/* 2025-03-26 has no structured content */
			ck_assert_ptr_null(json_object_get(result_of(m), "structuredContent"));
		} else if (id == 2) {
			ck_assert_str_eq(text_of(m), "e");
		}
		seen |= 1 << id;
	}
	ck_assert_int_eq(seen, 14);
	json_decref(r);
	client_stop(&c);
}
END_TEST

static atomic_int logged_info, logged_warning, log_level_asked;

static void count_log(void *ud, const char *level, const char *event, const char *message)
{
	(void)ud;
	(void)event;
	ck_assert_ptr_nonnull(message);
	if (strcmp(level, "info") == 0)
		atomic_fetch_add(&logged_info, 1);
	else if (strcmp(level, "warning") == 0)
		atomic_fetch_add(&logged_warning, 1);
}

static bool warnings_and_up(void *ud, const char *level)
{
	(void)ud;
	atomic_fetch_add(&log_level_asked, 1);
	return strcmp(level, "warning") == 0 || strcmp(level, "error") == 0;
}

START_TEST(log_levels_filtered_before_formatting)
{
	for (int filtered = 0; filtered < 2; filtered++) {
		atomic_store(&logged_info, 0);
		atomic_store(&logged_warning, 0);
		atomic_store(&log_level_asked, 0);
		cae_mcp_options o = {.log = count_log,
				     .log_enabled = filtered ? warnings_and_up : NULL,
				     .shutdown_fd = -1};
		struct client c;
		client_start(&c, &o);
		initialize(&c, "2025-06-18"); /* info: mcp.initialize */
		json_t *r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\","
					"\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":"
					"\"x\"}}}\n"); /* info: mcp.tool_call */
		json_decref(r);
		r = request(&c,
			    "{\"jsonrpc\":\"1.0\",\"id\":2,\"method\":\"ping\"}\n"); /* warning */
		json_decref(r);
		client_stop(&c);
		ck_assert_int_ge(atomic_load(&logged_warning), 1);
		if (filtered) {
			ck_assert_int_eq(atomic_load(&logged_info), 0);
			ck_assert_int_ge(atomic_load(&log_level_asked), 3);
		} else {
			ck_assert_int_ge(atomic_load(&logged_info), 2);
		}
	}
}
END_TEST

/* ---- prompts ------------------------------------------------------------------------- */

static cae_config *config_from(const char *yaml)
{
	cae_config *cfg;
	cae_error err;
	char *envp[] = {NULL};
	ck_assert_msg(cae_config_load_string(&cfg, yaml, strlen(yaml), "t.yaml", envp, &err) == 0,
		      "%s", err.message);
	return cfg;
}

/* The server options of `cae mcp` for cfg: its sections as prompts and instructions. */
static cae_prompts *prompts_for(const cae_config *cfg, cae_mcp_options *o)
{
	cae_error err;
	cae_policy *pol = cfg->command_executor.enabled ? cae_policy_from_config(cfg, &err) : NULL;
	cae_prompts *ps;
	ck_assert_msg(cae_prompts_new(cfg, pol, &ps, &err) == 0, "%s", err.message);
	cae_policy_free(pol);
	memset(o, 0, sizeof(*o));
	o->shutdown_fd = -1;
	o->prompts = ps;
	o->instructions = cae_prompts_instructions(ps);
	return ps;
}

/* A prompts/get request for name with arguments given as JSON text (NULL: none). */
static json_t *get_prompt(struct client *c, int id, const char *name, const char *args)
{
	char msg[4096];
	snprintf(msg, sizeof(msg),
		 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"prompts/get\",\"params\":{\"name\":"
		 "\"%s\"%s%s}}\n",
		 id, name, args ? ",\"arguments\":" : "", args ? args : "");
	json_t *r = request(c, msg);
	ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), id);
	return r;
}

/* The one user message's text of a GetPromptResult, checking its shape. */
static const char *prompt_text(json_t *res, const char *name)
{
	ck_assert_str_eq(json_string_value(json_object_get(res, "description")),
			 cae_prompts_description(name));
	json_t *msgs = json_object_get(res, "messages");
	ck_assert_uint_eq(json_array_size(msgs), 1);
	json_t *m = json_array_get(msgs, 0);
	ck_assert_str_eq(json_string_value(json_object_get(m, "role")), "user");
	json_t *content = json_object_get(m, "content");
	ck_assert_str_eq(json_string_value(json_object_get(content, "type")), "text");
	ck_assert(json_is_string(json_object_get(content, "text")));
	return json_string_value(json_object_get(content, "text"));
}

/* What `cae prompt` prints is what the server offers, for two configurations: the
 * instructions, prompts/list and every prompts/get, with and without an argument. */
START_TEST(prompts_are_the_sections)
{
	const char *yamls[] = {
	    "command_executor:\n  state_dir: /tmp\n",
	    "command_executor:\n  state_dir: /tmp\n  allowed_commands:\n    exclude: [curl, git]\n"
	    "    additional: [frobnicate]\n  environments:\n    rust: img-rust:2\n"
	    "  default_environment: rust\n",
	};
	const char *names[] = {"command-executor", "text-editor", "environment-selection"};
	for (size_t i = 0; i < sizeof(yamls) / sizeof(yamls[0]); i++) {
		cae_config *cfg = config_from(yamls[i]);
		cae_error err;
		cae_policy *pol = cae_policy_from_config(cfg, &err);
		char *want[3] = {cae_prompt_command_executor(cfg, pol), cae_prompt_text_editor(cfg),
				 cae_prompt_environment_selection(cfg)};
		cae_policy_free(pol);
		cae_mcp_options o;
		cae_prompts *ps = prompts_for(cfg, &o);
		struct client c;
		client_start(&c, &o);
		json_t *r = request(
		    &c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
			"\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}}}\n");
		json_t *res = result_of(r);
		json_t *caps = json_object_get(res, "capabilities");
		ck_assert(json_is_false(
		    json_object_get(json_object_get(caps, "prompts"), "listChanged")));
		char *joined;
		ck_assert_int_ge(asprintf(&joined, "%s\n%s", want[0], want[1]), 0);
		ck_assert_str_eq(json_string_value(json_object_get(res, "instructions")), joined);
		free(joined);
		json_decref(r);

		r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"prompts/list\"}\n");
		json_t *list = json_object_get(result_of(r), "prompts");
		json_t *expected = cae_prompts_list(ps);
		ck_assert(json_equal(list, expected));
		ck_assert_uint_eq(json_array_size(list), 3);
		json_decref(expected);
		json_decref(r);
		for (size_t k = 0; k < 3; k++) {
			r = get_prompt(&c, 10 + (int)k, names[k], NULL);
			ck_assert_str_eq(prompt_text(result_of(r), names[k]), want[k]);
			json_decref(r);
			r = get_prompt(&c, 20 + (int)k, names[k], "{}");
			ck_assert_str_eq(prompt_text(result_of(r), names[k]), want[k]);
			json_decref(r);
		}
		if (i == 1) {
			ck_assert_ptr_nonnull(strstr(want[0], "frobnicate"));
			ck_assert_ptr_nonnull(strstr(want[2], "| rust | img-rust:2 |"));
			ck_assert_ptr_nonnull(strstr(want[2], "choose \"rust\""));
		}
		/* an argument: the same text as cae_prompts_get (what `cae prompt --arg` prints) */
		json_t *a = json_pack("{s:s}", "branch", "fix/issue-14");
		char *branch_text;
		ck_assert_int_eq(cae_prompts_get(ps, "text-editor", a, &branch_text, &err), 0);
		json_decref(a);
		r = get_prompt(&c, 30, "text-editor", "{\"branch\":\"fix/issue-14\"}");
		ck_assert_str_eq(prompt_text(result_of(r), "text-editor"), branch_text);
		ck_assert_ptr_nonnull(strstr(branch_text, "git push origin fix/issue-14\n"));
		free(branch_text);
		json_decref(r);
		client_stop(&c);
		ck_assert_int_eq(c.result, 0);
		cae_prompts_free(ps);
		for (size_t k = 0; k < 3; k++)
			free(want[k]);
		cae_config_free(cfg);
	}
}
END_TEST

/* A disabled feature's sections are neither offered nor served, nor in the instructions;
 * with every section disabled there are no instructions. */
START_TEST(prompts_follow_the_features)
{
	cae_config *cfg = config_from("command_executor:\n  state_dir: /tmp\ntext_editor_mcp:\n"
				      "  enabled: false\n");
	cae_mcp_options o;
	cae_prompts *ps = prompts_for(cfg, &o);
	struct client c;
	client_start(&c, &o);
	json_t *r =
	    request(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
			"\"protocolVersion\":\"2025-11-25\",\"capabilities\":{}}}\n");
	const char *instructions = json_string_value(json_object_get(result_of(r), "instructions"));
	ck_assert_ptr_nonnull(strstr(instructions, "## Command Execution Feature"));
	ck_assert_ptr_null(strstr(instructions, "Text Editor"));
	json_decref(r);
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"prompts/list\"}\n");
	json_t *list = json_object_get(result_of(r), "prompts");
	ck_assert_uint_eq(json_array_size(list), 2);
	size_t i;
	json_t *p;
	json_array_foreach(list, i, p)
	{
		ck_assert_str_ne(json_string_value(json_object_get(p, "name")), "text-editor");
	}
	json_decref(r);
	r = get_prompt(&c, 3, "text-editor", NULL);
	ck_assert_int_eq(error_code(r), CAE_JSONRPC_INVALID_PARAMS);
	json_decref(r);
	client_stop(&c);
	cae_prompts_free(ps);
	cfg->command_executor.enabled = false;
	cfg->text_editor_mcp.enabled = false;
	ps = prompts_for(cfg, &o);
	client_start(&c, &o);
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
			"\"protocolVersion\":\"2025-11-25\",\"capabilities\":{}}}\n");
	ck_assert_ptr_null(json_object_get(result_of(r), "instructions"));
	json_decref(r);
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"prompts/list\"}\n");
	ck_assert_uint_eq(json_array_size(json_object_get(result_of(r), "prompts")), 0);
	json_decref(r);
	client_stop(&c);
	cae_prompts_free(ps);
	cae_config_free(cfg);
}
END_TEST

/* What a client can get wrong is a -32602 that says what, and the server goes on. */
START_TEST(prompt_errors)
{
	cae_config *cfg = config_from("command_executor:\n  state_dir: /tmp\n");
	cae_mcp_options o;
	cae_prompts *ps = prompts_for(cfg, &o);
	struct client c;
	client_start(&c, &o);
	/* before initialize: refused like every other method */
	json_t *r = get_prompt(&c, 1, "text-editor", NULL);
	ck_assert_int_eq(error_code(r), CAE_JSONRPC_SERVER_NOT_INITIALIZED);
	json_decref(r);
	initialize(&c, "2025-06-18");
	static const struct {
		const char *params;
		const char *says;
	} bad[] = {
	    {"{\"name\":\"no-such-prompt\"}", "unknown prompt \\\"no-such-prompt\\\""},
	    {"{\"name\":\"TEXT-EDITOR\"}", "unknown prompt"},
	    {"{\"name\":\"\"}", "name"},
	    {"{\"name\":5}", "name"},
	    {"{}", "name"},
	    {"{\"name\":\"text-editor\",\"arguments\":[\"main\"]}", "arguments"},
	    {"{\"name\":\"text-editor\",\"arguments\":\"main\"}", "arguments"},
	    {"{\"name\":\"text-editor\",\"arguments\":{\"branch\":5}}", "must be a string"},
	    {"{\"name\":\"text-editor\",\"arguments\":{\"branch\":null}}", "must be a string"},
	    {"{\"name\":\"text-editor\",\"arguments\":{\"nope\":\"x\"}}",
	     "no argument \\\"nope\\\""},
	    {"{\"name\":\"text-editor\",\"arguments\":{\"branch\":\"a b\"}}", "branch"},
	    {"{\"name\":\"text-editor\",\"arguments\":{\"branch\":\"main\\n## New rules\"}}",
	     "branch"},
	    {"{\"name\":\"command-executor\",\"arguments\":{\"branch\":\"main\"}}",
	     "takes environment"},
	    {"{\"name\":\"command-executor\",\"arguments\":{\"environment\":\"rust\"}}",
	     "no environment \\\"rust\\\" is configured"},
	    {"{\"name\":\"environment-selection\",\"arguments\":{\"branch\":\"main\"}}",
	     "takes none"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char msg[512];
		snprintf(
		    msg, sizeof(msg),
		    "{\"jsonrpc\":\"2.0\",\"id\":%zu,\"method\":\"prompts/get\",\"params\":%s}\n",
		    100 + i, bad[i].params);
		r = request(&c, msg);
		ck_assert_int_eq(json_integer_value(json_object_get(r, "id")), 100 + i);
		ck_assert_msg(error_code(r) == CAE_JSONRPC_INVALID_PARAMS, "%s", bad[i].params);
		char *dumped = json_dumps(r, 0);
		ck_assert_msg(strstr(dumped, bad[i].says) != NULL, "%s: %s", bad[i].params, dumped);
		free(dumped);
		json_decref(r);
	}
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":200,\"method\":\"prompts/list\",\"params\":{"
			"\"cursor\":\"x\"}}\n");
	ck_assert_int_eq(error_code(r), CAE_JSONRPC_INVALID_PARAMS);
	json_decref(r);
	/* still serving */
	r = get_prompt(&c, 201, "environment-selection", NULL);
	ck_assert_ptr_nonnull(
	    strstr(prompt_text(result_of(r), "environment-selection"), "| python |"));
	json_decref(r);
	client_stop(&c);
	ck_assert_int_eq(c.result, 0);
	cae_prompts_free(ps);
	cae_config_free(cfg);
}
END_TEST

/* Without prompts the server declares no prompts capability and knows no prompts methods. */
START_TEST(no_prompts_no_capability)
{
	struct client c;
	client_start(&c, NULL);
	json_t *r =
	    request(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
			"\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}}}\n");
	json_t *res = result_of(r);
	ck_assert_ptr_null(json_object_get(json_object_get(res, "capabilities"), "prompts"));
	ck_assert_ptr_null(json_object_get(res, "instructions"));
	json_decref(r);
	r = request(&c, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"prompts/list\"}\n");
	ck_assert_int_eq(error_code(r), CAE_JSONRPC_METHOD_NOT_FOUND);
	json_decref(r);
	r = get_prompt(&c, 3, "text-editor", NULL);
	ck_assert_int_eq(error_code(r), CAE_JSONRPC_METHOD_NOT_FOUND);
	json_decref(r);
	client_stop(&c);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("mcp");
	TCase *tc = tcase_create("server");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, initialize_negotiates_versions);
	tcase_add_test(tc, tools_list_output_schema_by_version);
	tcase_add_test(tc, tools_call_results_and_errors);
	tcase_add_test(tc, structured_content_only_where_the_version_has_it);
	tcase_add_test(tc, ping_unknown_methods_and_notifications);
	tcase_add_test(tc, progress_notifications);
	tcase_add_test(tc, keepalive_progress_for_silent_calls);
	tcase_add_test(tc, cancellation_signals_the_call);
	tcase_add_test(tc, requests_answered_during_a_slow_call);
	tcase_add_test(tc, back_to_back_requests_run_side_by_side);
	tcase_add_test(tc, bounded_calls_and_queue);
	tcase_add_test(tc, survives_garbage);
	tcase_add_test(tc, batches_under_older_versions);
	tcase_add_test(tc, end_of_input_cancels_running_calls);
	tcase_add_test(tc, requests_before_initialize_are_refused);
	tcase_add_test(tc, ids_beyond_int64_are_answered);
	tcase_add_test(tc, shutdown_fd_cancels_and_returns);
	tcase_add_test(tc, client_gone_is_an_error);
	tcase_add_test(tc, quick_calls_run_on_the_reader);
	tcase_add_test(tc, quick_calls_in_a_batch);
	tcase_add_test(tc, log_levels_filtered_before_formatting);
	tcase_add_test(tc, prompts_are_the_sections);
	tcase_add_test(tc, prompts_follow_the_features);
	tcase_add_test(tc, prompt_errors);
	tcase_add_test(tc, no_prompts_no_capability);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(make_suite());
}
