/* text_editor_mcp.mode: mcp — the configured MCP stdio text-editor server run in the current
 * environment, and the text editor's calls forwarded to it (cae_editor_mcp, cae/editor.h).
 *
 * The server is a command of the environment like a process session (procs.c): a thread runs
 * it through cae_backend_exec with live io, so it gets the environment's workspace, PATH,
 * user and confinement on every backend (the local sandbox's helper, a container's or a
 * pod's helper stream). Its stdin is a pipe the client writes requests to, its stdout is fed
 * to the client, the last bytes of its stderr say why it ended. It is started by the first
 * call, ended with its environment (the session's drop of the current environment: cleanup,
 * prepare, another environment made current) and after a call that left it in an unknown
 * state (timeout, cancellation, an answer that is not JSON-RPC): the next call starts it
 * again. A reference count keeps it while a call uses it. */
#include "tools/tools-internal.h"

#include "base/macro.h"
#include "base/utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/banned.h"

/* stderr bytes kept to say why the server ended */
#define ERR_TAIL 400

struct cae__mcp_editor {
	pthread_mutex_t lock; /* refs, the stderr tail */
	int refs;
	cae_backend *backend; /* borrowed: the session's, which outlive it */
	char *task_uuid;
	char **argv;
	cae_editor_mcp *client;
	pthread_t thread;
	bool thread_started;
	int in_r, in_w, cancel_r, cancel_w;
	char tail[ERR_TAIL];
	size_t tail_len;
};

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void on_output(void *ud, int stream, const char *data, size_t n)
{
	cae__mcp_editor *m = ud;
	if (stream == 1) {
		cae_editor_mcp_feed(m->client, data, n);
		return;
	}
	pthread_mutex_lock(&m->lock);
	if (n >= ERR_TAIL) {
		memcpy(m->tail, data + n - ERR_TAIL, ERR_TAIL);
		m->tail_len = ERR_TAIL;
	} else {
		size_t drop = m->tail_len + n > ERR_TAIL ? m->tail_len + n - ERR_TAIL : 0;
		memmove(m->tail, m->tail + drop, m->tail_len - drop);
		m->tail_len -= drop;
		memcpy(m->tail + m->tail_len, data, n);
		m->tail_len += n;
	}
	pthread_mutex_unlock(&m->lock);
}

static void *server_main(void *arg)
{
	cae__mcp_editor *m = arg;
	cae_live_io io = {.output = on_output, .ud = m, .stdin_fd = m->in_r};
	cae_exec_request req = {
	    .argv = (const char *const *)m->argv,
	    .max_stdout = 4096,
	    .max_stderr = 4096,
	    .cancel_fd = m->cancel_r,
	    .live = &io,
	};
	cae_run_result res;
	cae_error err = {0};
	int r = cae_backend_exec(m->backend, m->task_uuid, &req, &res, &err);
	char why[2048];
	if (r < 0) {
		snprintf(why, sizeof(why), "the text editor server (%.200s) could not run: %s",
			 m->argv[0],
			 r == -ENOENT && strstr(err.message, "not found")
			     ? "the program was not found in the environment"
			     : (err.message[0] ? err.message : strerror(-r)));
	} else {
		pthread_mutex_lock(&m->lock);
		size_t clean_len = 0;
		char *clean = cae__utf8_sanitize(m->tail, m->tail_len, &clean_len);
		pthread_mutex_unlock(&m->lock);
		/* the stderr's last line that says something */
		char *last = clean;
		while (clean && clean_len > 0 &&
		       (clean[clean_len - 1] == '\n' || clean[clean_len - 1] == '\r'))
			clean[--clean_len] = '\0';
		char *nl = clean ? strrchr(clean, '\n') : NULL;
		if (nl)
			last = nl + 1;
		if (res.cancelled)
			snprintf(why, sizeof(why), "the text editor server (%.200s) was ended",
				 m->argv[0]);
		else
			snprintf(why, sizeof(why),
				 "the text editor server (%.200s) ended (exit status %d)%s%.300s",
				 m->argv[0], res.exit_code, last && *last ? ": " : "",
				 last ? last : "");
		free(clean);
		cae_run_result_clear(&res);
	}
	/* nothing reads its stdin any more: writes fail instead of filling a pipe */
	close_fd(&m->in_r);
	cae_editor_mcp_closed(m->client, why);
	return NULL;
}

void cae__mcp_editor_unref(cae__mcp_editor *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	bool last = --m->refs == 0;
	pthread_mutex_unlock(&m->lock);
	if (!last)
		return;
	cae__mcp_editor_stop(m);
	if (m->thread_started)
		pthread_join(m->thread, NULL);
	cae_editor_mcp_free(m->client);
	close_fd(&m->in_r);
	close_fd(&m->in_w);
	close_fd(&m->cancel_r);
	close_fd(&m->cancel_w);
	for (char **a = m->argv; a && *a; a++)
		free(*a);
	free(m->argv);
	free(m->task_uuid);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

cae__mcp_editor *cae__mcp_editor_ref(cae__mcp_editor *m)
{
	pthread_mutex_lock(&m->lock);
	m->refs++;
	pthread_mutex_unlock(&m->lock);
	return m;
}

void cae__mcp_editor_stop(cae__mcp_editor *m)
{
	if (m && m->cancel_w >= 0)
		(void)!write(m->cancel_w, "k", 1);
}

bool cae__mcp_editor_usable(cae__mcp_editor *m)
{
	return cae_editor_mcp_usable(m->client);
}

const char *cae__mcp_editor_task(const cae__mcp_editor *m)
{
	return m->task_uuid;
}

int cae__mcp_editor_start(const cae_config *cfg, cae_backend *b, const char *task_uuid,
			  const char *workspace_path, const cae_editor_limits *limits,
			  cae__mcp_editor **out, cae_error *err)
{
	*out = NULL;
	cae__mcp_editor *m = calloc(1, sizeof(*m));
	if (!m)
		return cae_error_set(err, -ENOMEM, "out of memory");
	pthread_mutex_init(&m->lock, NULL);
	m->refs = 1;
	m->in_r = m->in_w = m->cancel_r = m->cancel_w = -1;
	m->backend = b;
	m->task_uuid = strdup(task_uuid);
	const cae_config_strlist *cmd = &cfg->text_editor_mcp.mcp_server.command;
	m->argv = calloc(cmd->n + 1, sizeof(char *));
	bool ok = m->task_uuid && m->argv;
	for (size_t i = 0; ok && i < cmd->n; i++)
		ok = (m->argv[i] = strdup(cmd->items[i])) != NULL;
	int fds[2];
	if (ok && pipe2(fds, O_CLOEXEC) == 0) {
		m->in_r = fds[0];
		m->in_w = fds[1];
	}
	if (ok && pipe2(fds, O_CLOEXEC) == 0) {
		m->cancel_r = fds[0];
		m->cancel_w = fds[1];
	}
	if (!ok || m->in_w < 0 || m->cancel_w < 0) {
		cae__mcp_editor_unref(m);
		return cae_error_set(err, ok ? -EMFILE : -ENOMEM,
				     "cannot start the text editor "
				     "server: %s",
				     ok ? "no pipe" : "out of memory");
	}
	cae_editor_mcp_options o = {
	    .in_fd = m->in_w,
	    .tool = cfg->text_editor_mcp.mcp_server.tool,
	    .display_root = workspace_path,
	    .limits = limits,
	    .timeout_ms = (long long)cfg->text_editor_mcp.mcp_server.timeout * 1000,
	};
	if (!(m->client = cae_editor_mcp_new(&o, err))) {
		cae__mcp_editor_unref(m);
		return err->code;
	}
	if (pthread_create(&m->thread, NULL, server_main, m) != 0) {
		cae__mcp_editor_unref(m);
		return cae_error_set(err, -EAGAIN,
				     "cannot start a thread for the text editor server");
	}
	m->thread_started = true;
	*out = m;
	return 0;
}

int cae__mcp_editor_call(cae__mcp_editor *m, json_t *args, int cancel_fd, cae_editor_result *res,
			 cae_error *err)
{
	int r = cae_editor_mcp_call(m->client, args, cancel_fd, res, err);
	/* a server whose state is unknown is ended now, not left running until the next call */
	if (r < 0 && !cae_editor_mcp_usable(m->client))
		cae__mcp_editor_stop(m);
	return r;
}
