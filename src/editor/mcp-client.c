/* The text editor as an MCP stdio server's tool (text_editor_mcp.mode: mcp): the MCP client
 * side (initialize, tools/list, tools/call) over a byte channel the caller runs, the call's
 * checks and confinement before it is sent, and the server's answer mapped back to a
 * cae_editor_result. What the server sends goes through the JSON-RPC layer (framing with a
 * line bound, depth-checked parsing, validation): it is untrusted. See cae/editor.h. */
#include "cae/editor.h"

#include "base/chase.h"
#include "base/macro.h"
#include "base/protect.h"
#include "base/timeutil.h"
#include "base/utf8.h"
#include "cae/jsonrpc.h"
#include "editor/editor-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/banned.h"

/* The protocol version asked for; servers answer with theirs, which is taken as it is. */
#define MCP_PROTOCOL_VERSION "2025-06-18"
/* How often a waiting call looks at its cancel descriptor. */
#define CANCEL_POLL_MS 100
/* Tools listed in an error naming what the server has. */
#define TOOLS_NAMED_MAX 8

struct cae_editor_mcp {
	int in_fd;
	char *tool;
	char *root;
	cae_editor_limits lim;
	char **protected;
	long long timeout_ms;
	size_t max_line;
	pthread_mutex_t call_lock;  /* one call at a time */
	pthread_mutex_t write_lock; /* whole messages on the server's stdin */
	pthread_mutex_t lock;	    /* what follows */
	pthread_cond_t cond;
	cae_jsonrpc_framer *framer;
	json_int_t next_id;
	json_int_t pending; /* the id waited for, 0: none */
	json_t *answer;	    /* its response (result or error member), new reference */
	bool answer_is_error;
	int fail; /* < 0: the pending call failed (-EPROTO) with fail_why */
	char fail_why[256];
	bool closed; /* the server is gone */
	char why[1024];
	bool broken; /* a call's failure left the server in an unknown state */
	bool ready;  /* handshake done */
	bool split;  /* <tool>_<command> tools instead of one */
};

static void cond_init_monotonic(pthread_cond_t *c)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(c, &ca);
	pthread_condattr_destroy(&ca);
}

cae_editor_mcp *cae_editor_mcp_new(const cae_editor_mcp_options *o, cae_error *err)
{
	cae_editor_mcp *c = calloc(1, sizeof(*c));
	if (!c) {
		cae_error_set(err, -ENOMEM, "out of memory");
		return NULL;
	}
	c->in_fd = o->in_fd;
	c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 60000;
	if (o->limits)
		c->lim = *o->limits;
	else
		cae_editor_limits_default(&c->lim);
	c->tool = strdup(o->tool ? o->tool : "text_editor");
	c->root = cae__ed_path_root_normalize(o->display_root);
	c->protected = calloc(c->lim.n_protected_paths + 1, sizeof(char *));
	bool ok = c->tool && c->root && c->protected;
	for (size_t i = 0; ok && i < c->lim.n_protected_paths; i++)
		ok = (c->protected[i] = strdup(c->lim.protected_paths[i])) != NULL;
	c->lim.protected_paths = (const char *const *)c->protected;
	/* an answer holds at most a file (view) with JSON's escaping of ordinary text */
	c->max_line = c->lim.max_file_bytes * 2 + ((size_t)1 << 20);
	c->framer = ok ? cae_jsonrpc_framer_new(c->max_line) : NULL;
	pthread_mutex_init(&c->call_lock, NULL);
	pthread_mutex_init(&c->write_lock, NULL);
	pthread_mutex_init(&c->lock, NULL);
	cond_init_monotonic(&c->cond);
	if (!c->framer) {
		cae_editor_mcp_free(c);
		cae_error_set(err, o->display_root && o->display_root[0] == '/' ? -ENOMEM : -EINVAL,
			      "text editor client: %s",
			      o->display_root && o->display_root[0] == '/'
				  ? "out of memory"
				  : "the workspace is not an absolute path");
		return NULL;
	}
	if (c->in_fd >= 0)
		(void)fcntl(c->in_fd, F_SETFL, fcntl(c->in_fd, F_GETFL) | O_NONBLOCK);
	return c;
}

void cae_editor_mcp_free(cae_editor_mcp *c)
{
	if (!c)
		return;
	cae_jsonrpc_framer_free(c->framer);
	json_decref(c->answer);
	for (size_t i = 0; c->protected && i < c->lim.n_protected_paths; i++)
		free(c->protected[i]);
	free(c->protected);
	free(c->tool);
	free(c->root);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->write_lock);
	pthread_mutex_destroy(&c->call_lock);
	free(c);
}

/* ---- the server's side of the channel ---- */

/* Fails the pending call (lock held) with what the server sent instead of an answer. */
static void fail_pending_locked(cae_editor_mcp *c, const char *what, const char *line, size_t len)
{
	if (!c->pending || c->fail < 0 || c->answer)
		return;
	size_t clean_len = 0;
	size_t keep = MIN(len, (size_t)80);
	keep = cae__utf8_floor(line ? line : "", line ? keep : 0);
	_cleanup_free_ char *clean = line ? cae__utf8_sanitize(line, keep, &clean_len) : NULL;
	c->fail = -EPROTO;
	snprintf(c->fail_why, sizeof(c->fail_why), "%s%s%s%s", what, clean ? ": \"" : "",
		 clean ? clean : "", clean ? (keep < len ? "...\"" : "\"") : "");
	pthread_cond_broadcast(&c->cond);
}

/* Writes all of data to the server's stdin, waiting at most until deadline_ns (0: do not
 * wait). Returns 0, -EPIPE, -ETIMEDOUT. */
static int write_all(cae_editor_mcp *c, const char *data, size_t len, int64_t deadline_ns)
{
	size_t done = 0;
	while (done < len) {
		ssize_t w = write(c->in_fd, data + done, len - done);
		if (w > 0) {
			done += (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno != EAGAIN)
			return -EPIPE;
		int64_t left_ms = (deadline_ns - cae__now_ns()) / 1000000;
		if (deadline_ns == 0 || left_ms <= 0)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = c->in_fd, .events = POLLOUT};
		(void)poll(&p, 1, (int)MIN(left_ms, (int64_t)CANCEL_POLL_MS));
		if (p.revents & (POLLERR | POLLHUP))
			return -EPIPE;
	}
	return 0;
}

/* A request of the server's (lock held): ping is answered, the rest refused, without
 * waiting for a stdin the server does not read. */
static void answer_server_request(cae_editor_mcp *c, const cae_jsonrpc_msg *m)
{
	json_t *reply =
	    strcmp(m->method, "ping") == 0
		? cae_jsonrpc_result(m->id, json_object())
		: cae_jsonrpc_error(m->id, CAE_JSONRPC_METHOD_NOT_FOUND, "method not found", NULL);
	size_t n = 0;
	_cleanup_free_ char *text = reply ? cae_jsonrpc_encode(reply, &n) : NULL;
	json_decref(reply);
	if (text && pthread_mutex_trylock(&c->write_lock) == 0) {
		(void)write_all(c, text, n, 0);
		pthread_mutex_unlock(&c->write_lock);
	}
}

static void handle_line(cae_editor_mcp *c, const char *line, size_t len)
{
	json_t *v = NULL;
	cae_jsonrpc_err e;
	if (cae_jsonrpc_parse(line, len, 0, &v, &e) < 0 || !json_is_object(v)) {
		json_decref(v);
		fail_pending_locked(c, "the text editor server wrote a line that is not JSON-RPC",
				    line, len);
		return;
	}
	cae_jsonrpc_msg m;
	if (cae_jsonrpc_validate(v, &m, &e) < 0) {
		json_decref(v);
		fail_pending_locked(c, "the text editor server wrote an invalid JSON-RPC message",
				    line, len);
		return;
	}
	if (m.kind == CAE_JSONRPC_REQUEST) {
		answer_server_request(c, &m);
	} else if (m.kind == CAE_JSONRPC_RESPONSE && c->pending && json_is_integer(m.id) &&
		   json_integer_value(m.id) == c->pending && !c->answer && c->fail == 0) {
		c->answer_is_error = m.error != NULL;
		c->answer = json_incref(m.error ? m.error : m.result);
		pthread_cond_broadcast(&c->cond);
	}
	/* notifications and answers to nothing we asked are ignored */
	json_decref(v);
}

/* Hands every complete line the framer holds to handle_line (lock held). Returns whether
 * the framer let go of anything. */
static bool drain_locked(cae_editor_mcp *c)
{
	const char *line;
	size_t n;
	int r;
	bool any = false;
	while ((r = cae_jsonrpc_framer_next(c->framer, &line, &n)) != 0) {
		any = true;
		if (r == -E2BIG) {
			char what[160];
			snprintf(what, sizeof(what),
				 "the text editor server's answer is longer than %zu bytes",
				 c->max_line);
			fail_pending_locked(c, what, NULL, 0);
		} else if (r > 0) {
			handle_line(c, line, n);
		}
	}
	return any;
}

void cae_editor_mcp_feed(cae_editor_mcp *c, const char *data, size_t len)
{
	pthread_mutex_lock(&c->lock);
	while (len > 0) {
		long took = cae_jsonrpc_framer_feed(c->framer, data, len);
		if (took < 0 || (took == 0 && !drain_locked(c))) {
			/* out of memory, or a framer that takes nothing more: the rest is lost,
			 * and so is the answer waited for */
			fail_pending_locked(c, "the text editor server's output could not be read",
					    NULL, 0);
			break;
		}
		data += took;
		len -= (size_t)took;
		drain_locked(c);
	}
	pthread_mutex_unlock(&c->lock);
}

void cae_editor_mcp_closed(cae_editor_mcp *c, const char *why)
{
	pthread_mutex_lock(&c->lock);
	c->closed = true;
	snprintf(c->why, sizeof(c->why), "%s", why ? why : "the text editor server ended");
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

bool cae_editor_mcp_usable(cae_editor_mcp *c)
{
	pthread_mutex_lock(&c->lock);
	bool ok = !c->closed && !c->broken;
	pthread_mutex_unlock(&c->lock);
	return ok;
}

/* ---- requests ---- */

static bool cancelled(int fd)
{
	if (fd < 0)
		return false;
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, 0) > 0;
}

/* Sends method(params) and waits for its answer until deadline. Returns 0 with *out (the
 * result, new reference) or 1 with *out the JSON-RPC error object; -errno with err set. */
static int request(cae_editor_mcp *c, const char *method, json_t *params, int64_t deadline_ns,
		   int cancel_fd, json_t **out, cae_error *err)
{
	*out = NULL;
	pthread_mutex_lock(&c->lock);
	json_int_t id = ++c->next_id;
	c->pending = id;
	c->fail = 0;
	json_decref(c->answer);
	c->answer = NULL;
	bool closed = c->closed;
	pthread_mutex_unlock(&c->lock);
	if (closed) {
		json_decref(params);
		pthread_mutex_lock(&c->lock);
		c->pending = 0;
		int r = cae_error_set(err, -EPIPE, "%s", c->why);
		pthread_mutex_unlock(&c->lock);
		return r;
	}
	json_t *idj = json_integer(id);
	json_t *msg = json_pack("{s:s, s:o, s:s, s:o}", "jsonrpc", "2.0", "id", idj, "method",
				method, "params", params);
	size_t n = 0;
	_cleanup_free_ char *text = msg ? cae_jsonrpc_encode(msg, &n) : NULL;
	json_decref(msg);
	int r = 0;
	if (!text) {
		r = cae_error_set(err, -ENOMEM, "out of memory");
	} else {
		pthread_mutex_lock(&c->write_lock);
		r = write_all(c, text, n, deadline_ns);
		pthread_mutex_unlock(&c->write_lock);
	}
	pthread_mutex_lock(&c->lock);
	while (r == 0 && !c->answer && c->fail == 0 && !c->closed) {
		if (cancelled(cancel_fd)) {
			r = -ECANCELED;
			break;
		}
		int64_t now = cae__now_ns();
		if (now >= deadline_ns) {
			r = -ETIMEDOUT;
			break;
		}
		int64_t until = MIN(deadline_ns, now + (int64_t)CANCEL_POLL_MS * 1000000);
		struct timespec ts = {until / 1000000000LL, until % 1000000000LL};
		pthread_cond_timedwait(&c->cond, &c->lock, &ts);
	}
	if (r == 0 && c->answer) {
		*out = c->answer;
		c->answer = NULL;
		r = c->answer_is_error ? 1 : 0;
	} else if (r == 0 && c->fail < 0) {
		r = cae_error_set(err, c->fail, "%s", c->fail_why);
		c->broken = true;
	} else if (r == 0 || r == -EPIPE) {
		r = cae_error_set(err, -EPIPE, "%s",
				  c->closed ? c->why
					    : "the text editor server does not read its input");
		c->broken = true;
	} else if (r == -ETIMEDOUT) {
		r = cae_error_set(err, r,
				  "the text editor server did not answer %s within %lld s "
				  "(text_editor_mcp.mcp_server.timeout)",
				  method, (c->timeout_ms + 999) / 1000);
		c->broken = true;
	} else if (r == -ECANCELED) {
		r = cae_error_set(err, r, "the call was cancelled");
		c->broken = true;
	}
	c->pending = 0;
	pthread_mutex_unlock(&c->lock);
	return r;
}

static int notify(cae_editor_mcp *c, const char *method, int64_t deadline_ns)
{
	json_t *msg = cae_jsonrpc_notification(method, NULL);
	size_t n = 0;
	_cleanup_free_ char *text = msg ? cae_jsonrpc_encode(msg, &n) : NULL;
	json_decref(msg);
	if (!text)
		return -ENOMEM;
	pthread_mutex_lock(&c->write_lock);
	int r = write_all(c, text, n, deadline_ns);
	pthread_mutex_unlock(&c->write_lock);
	return r;
}

static int protocol_error(cae_editor_mcp *c, cae_error *err, const char *msg)
{
	pthread_mutex_lock(&c->lock);
	c->broken = true;
	pthread_mutex_unlock(&c->lock);
	return cae_error_set(err, -EPROTO, "%s", msg);
}

/* initialize, notifications/initialized, tools/list: which tool form the server has. */
static int handshake(cae_editor_mcp *c, int64_t deadline_ns, int cancel_fd, cae_error *err)
{
	json_t *params =
	    json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", MCP_PROTOCOL_VERSION,
		      "capabilities", "clientInfo", "name", "cae", "version", CAE_VERSION);
	if (!params)
		return cae_error_set(err, -ENOMEM, "out of memory");
	json_t *res = NULL;
	int r = request(c, "initialize", params, deadline_ns, cancel_fd, &res, err);
	if (r == 1) {
		const char *m = json_string_value(json_object_get(res, "message"));
		size_t l = m ? strlen(m) : 0;
		_cleanup_free_ char *clean =
		    m ? cae__utf8_sanitize(m, MIN(l, (size_t)200), &l) : NULL;
		char msg[300];
		snprintf(msg, sizeof(msg), "the text editor server refused initialize: %s",
			 clean ? clean : "(no message)");
		json_decref(res);
		return protocol_error(c, err, msg);
	}
	if (r < 0)
		return r;
	bool has_tools =
	    json_is_object(res) && json_is_object(json_object_get(res, "capabilities"));
	json_decref(res);
	if (!has_tools)
		return protocol_error(c, err,
				      "the text editor server's initialize answer has no "
				      "capabilities");
	if ((r = notify(c, "notifications/initialized", deadline_ns)) < 0)
		return cae_error_set(err, r, "the text editor server does not read its input");
	r = request(c, "tools/list", json_object(), deadline_ns, cancel_fd, &res, err);
	if (r == 1) {
		json_decref(res);
		return protocol_error(c, err, "the text editor server refused tools/list");
	}
	if (r < 0)
		return r;
	json_t *tools = json_object_get(res, "tools");
	if (!json_is_array(tools)) {
		json_decref(res);
		return protocol_error(c, err,
				      "the text editor server's tools/list answer has no tools");
	}
	size_t tool_len = strlen(c->tool);
	bool one = false, split = false;
	char names[512] = "";
	size_t used = 0, i;
	json_t *t;
	json_array_foreach(tools, i, t)
	{
		const char *name = json_string_value(json_object_get(t, "name"));
		if (!name)
			continue;
		one |= strcmp(name, c->tool) == 0;
		split |= strncmp(name, c->tool, tool_len) == 0 &&
			 strcmp(name + tool_len, "_str_replace") == 0;
		if (i < TOOLS_NAMED_MAX && used < sizeof(names)) {
			int w = snprintf(names + used, sizeof(names) - used, "%s%.60s",
					 used ? ", " : "", name);
			used += w > 0 ? (size_t)w : 0;
		}
	}
	json_decref(res);
	if (!one && !split) {
		/* initialized, but of no use: the next call starts a new server */
		pthread_mutex_lock(&c->lock);
		c->broken = true;
		pthread_mutex_unlock(&c->lock);
		size_t clean_len;
		_cleanup_free_ char *clean =
		    cae__utf8_sanitize(names, strnlen(names, sizeof(names)), &clean_len);
		return cae_error_set(err, -ENOENT,
				     "the text editor server has no tool %s "
				     "(text_editor_mcp.mcp_server.tool); it has: %s",
				     c->tool, clean && *clean ? clean : "none");
	}
	c->split = !one;
	c->ready = true;
	return 0;
}

/* ---- one call ---- */

/* The server's arguments for a checked request: the path absolute under the workspace. */
static json_t *server_args(const cae_editor_mcp *c, const cae_editor_request *q, const char *abs)
{
	json_t *a = json_object();
	if (!a)
		return NULL;
	if (!c->split)
		json_object_set_new(a, "command", json_string(cae_editor_command_name(q->command)));
	json_object_set_new(a, "path", json_string(abs));
	switch (q->command) {
	case CAE_EDITOR_CMD_VIEW:
		if (q->has_range)
			json_object_set_new(
			    a, "view_range",
			    json_pack("[I, I]", (json_int_t)q->range[0], (json_int_t)q->range[1]));
		break;
	case CAE_EDITOR_CMD_CREATE:
		json_object_set_new(a, "file_text", json_stringn(q->text, q->text_len));
		break;
	case CAE_EDITOR_CMD_STR_REPLACE:
		json_object_set_new(a, "old_str", json_stringn(q->text, q->text_len));
		json_object_set_new(a, "new_str",
				    json_stringn(q->new_str ? q->new_str : "", q->new_len));
		break;
	case CAE_EDITOR_CMD_INSERT:
		json_object_set_new(a, "insert_line", json_integer((json_int_t)q->line));
		json_object_set_new(a, "new_str", json_stringn(q->new_str, q->new_len));
		break;
	default:
		break;
	}
	return a;
}

/* The lexical confinement of the native editor, worded like it: 0 with *abs (new), 1 with
 * res an error, -ENOMEM. */
static int confine(const cae_editor_mcp *c, const cae_editor_request *q, char **abs,
		   cae_editor_result *res)
{
	_cleanup_free_ char *rel = NULL;
	int r = cae__path_lexical(c->root, NULL, q->path, q->path_len,
				  CAE_PATH_UTF8 | CAE_PATH_FOLD_DOTDOT, &rel);
	switch (r) {
	case 0:
		break;
	case -ENOENT:
		r = cae__ed_res_error(
		    res, "Parameter `path` must not be empty: give a path inside %s.", c->root);
		return r < 0 ? r : 1;
	case -ENAMETOOLONG:
		r = cae__ed_res_error(
		    res, "The path is too long (%zu bytes); a path has at most %d bytes.",
		    q->path_len, ED_PATH_MAX);
		return r < 0 ? r : 1;
	case -EINVAL:
		r = cae__ed_res_error(
		    res, "The path contains a NUL character, which no file name can hold.");
		return r < 0 ? r : 1;
	case -EILSEQ:
		r = cae__ed_res_error(res,
				      "The path is not valid UTF-8; give the path as UTF-8 text.");
		return r < 0 ? r : 1;
	case -EXDEV:
		r = cae__ed_res_error(res,
				      "The path %.*s is outside the workspace %s. Only files and "
				      "directories inside %s can be viewed or edited; a relative "
				      "path is taken relative to %s.",
				      (int)MIN(q->path_len, (size_t)ED_PATH_MAX), q->path, c->root,
				      c->root, c->root);
		return r < 0 ? r : 1;
	default:
		return -ENOMEM;
	}
	*abs = cae__ed_path_display(c->root, rel);
	if (!*abs)
		return -ENOMEM;
	if (q->command != CAE_EDITOR_CMD_VIEW &&
	    cae__protected_lexical(rel, c->lim.protected_paths, c->lim.n_protected_paths)) {
		r = cae__ed_res_error(res,
				      "The path %s is protected: it is, or lies below, one of the "
				      "workspace's protected paths, which the editor does not "
				      "create, edit or undo (and commands cannot change). Edit "
				      "files elsewhere in the workspace.",
				      *abs);
		free(*abs);
		*abs = NULL;
		return r < 0 ? r : 1;
	}
	return 0;
}

/* text as a result text: valid UTF-8, at most max_output_chars characters. New string. */
static char *result_text(const cae_editor_mcp *c, const char *text, size_t len)
{
	size_t clean_len = 0;
	_cleanup_free_ char *clean = cae__utf8_sanitize(text, len, &clean_len);
	if (!clean)
		return NULL;
	size_t chars = 0;
	size_t keep = cae__utf8_prefix_chars(clean, clean_len, c->lim.max_output_chars, &chars);
	if (keep == clean_len)
		return TAKE_PTR(clean);
	char *out = NULL;
	if (asprintf(&out,
		     "%.*s\n[... the text editor server's answer was cut here after %zu "
		     "characters (text_editor_mcp.view_max_chars)]",
		     (int)keep, clean, chars) < 0)
		return NULL;
	return out;
}

/* A tools/call result ({content: [{type, text}...], isError}) as *res. 0, 1 (not a tool
 * result: err set), -ENOMEM. */
static int map_result(const cae_editor_mcp *c, json_t *result, cae_editor_result *res,
		      cae_error *err)
{
	json_t *content = json_object_get(result, "content");
	if (!json_is_object(result) || !json_is_array(content)) {
		cae_error_set(err, -EPROTO, "the text editor server's answer is not a tool result");
		return 1;
	}
	res->is_error = json_is_true(json_object_get(result, "isError"));
	cae_buf all;
	cae__buf_init(&all, c->max_line);
	size_t i;
	json_t *item;
	int r = 0;
	json_array_foreach(content, i, item)
	{
		json_t *t = json_object_get(item, "text");
		const char *type = json_string_value(json_object_get(item, "type"));
		if (!type || strcmp(type, "text") != 0 || !json_is_string(t))
			continue;
		if (all.len && (r = cae__buf_append(&all, "\n", 1)) < 0)
			break;
		if ((r = cae__buf_append(&all, json_string_value(t), json_string_length(t))) < 0)
			break;
	}
	if (r < 0) {
		cae__buf_clear(&all);
		return -ENOMEM;
	}
	/* the npm server's shape: {"success", "message", "content"} in one text */
	json_t *shaped = all.len && all.data[0] == '{'
			     ? json_loadb(all.data, all.len, JSON_REJECT_DUPLICATES, NULL)
			     : NULL;
	json_t *success = json_object_get(shaped, "success");
	const char *text = all.data ? all.data : "";
	size_t text_len = all.len;
	const char *summary = NULL;
	if (json_is_boolean(success)) {
		json_t *body = json_object_get(shaped, "content");
		json_t *message = json_object_get(shaped, "message");
		res->is_error |= !json_is_true(success);
		summary = json_string_value(message);
		if (json_is_string(body) && !res->is_error) {
			text = json_string_value(body);
			text_len = json_string_length(body);
		} else if (json_is_string(message)) {
			text = json_string_value(message);
			text_len = json_string_length(message);
		}
	}
	res->text = result_text(c, text, text_len);
	if (summary) {
		size_t l = 0;
		res->summary = cae__utf8_sanitize(summary, strlen(summary), &l);
	}
	json_decref(shaped);
	cae__buf_clear(&all);
	return res->text ? 0 : -ENOMEM;
}

int cae_editor_mcp_call(cae_editor_mcp *c, json_t *args, int cancel_fd, cae_editor_result *res,
			cae_error *err)
{
	memset(res, 0, sizeof(*res));
	cae_editor_request q;
	int r = cae_editor_parse(args, &q, res);
	if (r != 0)
		return r > 0 ? 0 : cae_error_set(err, r, "out of memory");
	_cleanup_free_ char *abs = NULL;
	r = confine(c, &q, &abs, res);
	if (r != 0) {
		res->command = q.command;
		return r > 0 ? 0 : cae_error_set(err, r, "out of memory");
	}
	pthread_mutex_lock(&c->call_lock);
	int64_t deadline = cae__now_ns() + c->timeout_ms * 1000000LL;
	r = c->ready ? 0 : handshake(c, deadline, cancel_fd, err);
	json_t *answer = NULL;
	if (r == 0) {
		char name[160];
		snprintf(name, sizeof(name), "%s%s%s", c->tool, c->split ? "_" : "",
			 c->split ? cae_editor_command_name(q.command) : "");
		json_t *a = server_args(c, &q, abs);
		json_t *params = a ? json_pack("{s:s, s:o}", "name", name, "arguments", a) : NULL;
		r = params ? request(c, "tools/call", params, deadline, cancel_fd, &answer, err)
			   : cae_error_set(err, -ENOMEM, "out of memory");
	}
	pthread_mutex_unlock(&c->call_lock);
	if (r == 1) {
		/* the server refused the call itself: the agent reads why */
		const char *m = json_string_value(json_object_get(answer, "message"));
		size_t l = m ? strlen(m) : 0;
		_cleanup_free_ char *clean =
		    m ? cae__utf8_sanitize(m, MIN(l, (size_t)1000), &l) : NULL;
		r = cae__ed_res_error(res, "The text editor server refused the call: %s",
				      clean ? clean : "(no message)");
		json_decref(answer);
		if (r < 0)
			return cae_error_set(err, r, "out of memory");
	} else if (r == 0) {
		r = map_result(c, answer, res, err);
		json_decref(answer);
		if (r != 0) {
			cae_editor_result_clear(res);
			if (r > 0) {
				pthread_mutex_lock(&c->lock);
				c->broken = true;
				pthread_mutex_unlock(&c->lock);
				return -EPROTO;
			}
			return cae_error_set(err, r, "out of memory");
		}
	} else {
		cae_editor_result_clear(res);
		return r;
	}
	res->command = q.command;
	res->path = TAKE_PTR(abs);
	return 0;
}
