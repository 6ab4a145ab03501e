/* The MCP server loop: a reader on the calling thread, tool calls on worker threads.
 *
 * The reader frames and validates every incoming line and answers what is quick itself
 * (initialize, ping, errors, prompts/list and prompts/get, and the tool calls the handler
 * calls quick: waking a worker would cost more than they do). tools/list and tools/call become jobs
 * in a FIFO list that worker threads (started on demand, at most max_calls) take from; the list
 * also serves to find a job by request id for notifications/cancelled, which drops a queued job and
 * makes a running one's cancel pipe readable. A batch (older protocol versions) collects its
 * answers and is written as one array when its last request is settled.
 *
 * A running call whose client asked for progress hears from the server at least every
 * HEARTBEAT_NS, whether or not the tool reports anything (a silent command, a dependency
 * install): the keeper thread sends a progress notification a little above the last one
 * (1/1024 more each time, so that the tool's own next value, a whole number above, stays
 * above it), which keeps a client's request timeout from firing (resetTimeoutOnProgress).
 *
 * Locks: `lock` guards the job list, the workers, the batches and the negotiated version;
 * `write_lock` serializes whole lines on out_fd. `lock` is never held while writing.
 */
#include "cae/mcp.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "mcp/mcp-internal.h"
#include "base/banned.h"

#define DEFAULT_MAX_CALLS 4u
#define DEFAULT_MAX_QUEUED 64u
#define BIG_REQUEST ((size_t)1 << 20)
#define HEARTBEAT_NS (5 * 1000000000LL) /* at most this long without a progress notification */
#define HEARTBEAT_STEP (1.0 / 1024)
#define HEARTBEAT_MAX 1023 /* per value the tool reported: they stay below its next one */

struct batch {
	json_t *responses; /* the answers so far */
	unsigned refs;	   /* the reader while dispatching, plus each unsettled job */
};

enum job_kind { JOB_LIST, JOB_CALL };
enum job_state { JOB_QUEUED, JOB_RUNNING };

struct server;

struct job {
	struct job *next;
	struct server *srv;
	enum job_kind kind;
	enum job_state state;
	json_t *id;		/* owned */
	struct batch *batch;	/* NULL: answered alone */
	char *name;		/* tools/call: owned */
	json_t *args;		/* tools/call: owned */
	json_t *progress_token; /* owned, NULL when the client asked for no progress */
	bool structured;	/* the protocol version has structured output */
	bool progress_message;	/* ... and messages in progress notifications */
	bool cancelled;
	bool progress_sent;
	double last_progress;	 /* the last value sent, the tool's or a keep-alive's */
	double last_reported;	 /* the tool's own last value (0 before one) */
	int64_t last_sent_ns;	 /* when the last notification went (or the call started) */
	unsigned keepalives;	 /* sent since the tool's last value */
	unsigned keepalive_busy; /* keep-alives being written: the answer waits for them */
	bool answered;		 /* the call returned: no keep-alive starts any more */
	int cancel_pipe[2];
	int64_t started_ns;
	size_t bytes; /* the request line's length: what the job may hold in memory */
};

struct server {
	const cae_mcp_handler *h;
	cae_mcp_options o;
	int out_fd;
	bool out_is_socket;

	pthread_mutex_t write_lock;
	bool out_broken; /* under write_lock */
	int out_errno;

	pthread_mutex_t lock;
	pthread_cond_t work;	       /* a job was queued, or the workers must stop */
	pthread_cond_t keepalive_done; /* a keep-alive was written */
	pthread_cond_t keeper_wake;    /* the keeper must stop */
	pthread_t keeper;
	bool keeper_started, keeper_stop;
	struct job *jobs; /* every queued or running job, oldest first */
	unsigned njobs;
	unsigned nqueued;
	size_t line_bytes; /* the line being dispatched (the reader's) */
	size_t held_bytes; /* what the jobs' request lines add up to */
	pthread_t *workers;
	unsigned nworkers;
	unsigned idle_workers; /* waiting for work, not yet handed a ticket */
	unsigned tickets;      /* wake-ups handed to idle workers, not yet taken */
	bool stopping;
	bool draining; /* the reader waits for the jobs: wake it when one ends */
	int wake[2];
	const char *version; /* negotiated (static string), NULL before initialize */
};

static void slog(struct server *srv, const char *level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void slog(struct server *srv, const char *level, const char *event, const char *fmt, ...)
{
	if (!srv->o.log || (srv->o.log_enabled && !srv->o.log_enabled(srv->o.log_userdata, level)))
		return;
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	srv->o.log(srv->o.log_userdata, level, event, msg);
}

static int write_out(struct server *srv, const char *p, size_t n)
{
	if (!srv->out_is_socket)
		return cae__write_all(srv->out_fd, p, n);
	while (n > 0) {
		ssize_t k = send(srv->out_fd, p, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Writes one message as one line. Steals msg. */
static int send_msg(struct server *srv, json_t *msg)
{
	if (!msg) {
		slog(srv, "error", "mcp.out_of_memory", "could not build a message");
		return -ENOMEM;
	}
	size_t n;
	_cleanup_free_ char *line = cae_jsonrpc_encode(msg, &n);
	json_decref(msg);
	if (!line) {
		slog(srv, "error", "mcp.out_of_memory", "could not encode a message");
		return -ENOMEM;
	}
	int r = 0;
	bool first_failure = false;
	pthread_mutex_lock(&srv->write_lock);
	if (srv->out_broken) {
		r = -srv->out_errno;
	} else {
		r = write_out(srv, line, n);
		if (r < 0) {
			srv->out_broken = true;
			srv->out_errno = -r;
			first_failure = true;
		}
	}
	pthread_mutex_unlock(&srv->write_lock);
	if (first_failure)
		slog(srv, "error", "mcp.write_failed", "cannot write to the client: %s",
		     strerror(-r));
	return r;
}

static bool out_broken(struct server *srv)
{
	pthread_mutex_lock(&srv->write_lock);
	bool b = srv->out_broken;
	pthread_mutex_unlock(&srv->write_lock);
	return b;
}

/* ---- batches and jobs -------------------------------------------------------------- */

/* Records a request's answer (resp stolen, may be NULL: no answer) in its batch, under
 * srv->lock. Returns what to write now: resp itself without a batch, the batch's array when
 * this settled its last request, else NULL. */
static json_t *settle_locked(struct batch *b, json_t *resp)
{
	if (!b)
		return resp;
	if (resp)
		json_array_append_new(b->responses, resp);
	if (--b->refs > 0)
		return NULL;
	json_t *out = b->responses;
	free(b);
	if (json_array_size(out) == 0) {
		json_decref(out);
		return NULL;
	}
	return out;
}

/* Answers a request from the reader thread: alone, or into its batch. Steals resp. */
static void reply(struct server *srv, struct batch *b, json_t *resp)
{
	if (!b) {
		send_msg(srv, resp);
		return;
	}
	if (!resp)
		return;
	pthread_mutex_lock(&srv->lock);
	json_array_append_new(b->responses, resp);
	pthread_mutex_unlock(&srv->lock);
}

static void reply_error(struct server *srv, struct batch *b, json_t *id, int code, const char *msg)
{
	reply(srv, b, cae_jsonrpc_error(id, code, msg, NULL));
}

static void job_free(struct job *j)
{
	if (!j)
		return;
	json_decref(j->id);
	json_decref(j->args);
	json_decref(j->progress_token);
	free(j->name);
	if (j->cancel_pipe[0] >= 0)
		close(j->cancel_pipe[0]);
	if (j->cancel_pipe[1] >= 0)
		close(j->cancel_pipe[1]);
	free(j);
}

static void unlink_job_locked(struct server *srv, struct job *j)
{
	for (struct job **p = &srv->jobs; *p; p = &(*p)->next)
		if (*p == j) {
			*p = j->next;
			break;
		}
	j->next = NULL;
	srv->njobs--;
	srv->held_bytes -= j->bytes;
	if (j->state == JOB_QUEUED)
		srv->nqueued--;
	if (srv->draining) {
		char c = 0;
		ssize_t k = write(srv->wake[1], &c, 1);
		(void)k; /* a full pipe already wakes the reader */
	}
}

/* Cancels a job under srv->lock: a running one gets its cancel pipe made readable (its
 * answer will be dropped); a queued one is removed and returned for the caller to settle
 * and free once the lock is released. */
static struct job *cancel_job_locked(struct server *srv, struct job *j)
{
	if (j->cancelled)
		return NULL;
	j->cancelled = true;
	if (j->state == JOB_RUNNING) {
		char c = 'c';
		ssize_t k = write(j->cancel_pipe[1], &c, 1);
		(void)k;
		return NULL;
	}
	unlink_job_locked(srv, j);
	return j;
}

/* Settles and frees jobs removed from the list before they ran (no answer: cancelled). */
static void drop_jobs(struct server *srv, struct job *list)
{
	while (list) {
		struct job *next = list->next;
		pthread_mutex_lock(&srv->lock);
		json_t *out = settle_locked(list->batch, NULL);
		pthread_mutex_unlock(&srv->lock);
		if (out)
			send_msg(srv, out);
		job_free(list);
		list = next;
	}
}

static void cancel_all(struct server *srv)
{
	struct job *dropped = NULL;
	pthread_mutex_lock(&srv->lock);
	for (struct job *j = srv->jobs, *next; j; j = next) {
		next = j->next;
		struct job *d = cancel_job_locked(srv, j);
		if (d) {
			d->next = dropped;
			dropped = d;
		}
	}
	pthread_mutex_unlock(&srv->lock);
	drop_jobs(srv, dropped);
}

static void cancel_by_id(struct server *srv, json_t *id)
{
	struct job *dropped = NULL;
	bool found = false;
	pthread_mutex_lock(&srv->lock);
	for (struct job *j = srv->jobs; j; j = j->next)
		if (json_equal(j->id, id)) {
			found = true;
			dropped = cancel_job_locked(srv, j);
			break;
		}
	pthread_mutex_unlock(&srv->lock);
	_cleanup_free_ char *ids = json_dumps(id, JSON_ENCODE_ANY);
	if (found)
		slog(srv, "info", "mcp.cancelled", "request %s cancelled by the client",
		     ids ? ids : "?");
	else
		slog(srv, "debug", "mcp.cancel_unknown", "no running request %s to cancel",
		     ids ? ids : "?");
	drop_jobs(srv, dropped);
}

/* ---- running jobs ------------------------------------------------------------------ */

static void progress_cb(void *userdata, double progress, double total, const char *message)
{
	struct job *j = userdata;
	struct server *srv = j->srv;
	if (!j->progress_token || progress != progress || progress > 1e300 || progress < -1e300)
		return;
	pthread_mutex_lock(&srv->lock);
	/* MCP: progress must increase with each notification, and none after cancellation. */
	bool skip = j->cancelled || (j->progress_sent && progress <= j->last_progress);
	if (!skip) {
		j->progress_sent = true;
		j->last_progress = progress;
		j->last_reported = progress;
		j->last_sent_ns = cae__now_ns();
		j->keepalives = 0;
	}
	pthread_mutex_unlock(&srv->lock);
	if (skip)
		return;
	json_t *params =
	    json_pack("{s:O, s:f}", "progressToken", j->progress_token, "progress", progress);
	if (params && total > 0 && total < 1e300)
		json_object_set_new(params, "total", json_real(total));
	if (params && message && j->progress_message) {
		json_t *m = json_string(message);
		if (m)
			json_object_set_new(params, "message", m);
	}
	if (params)
		send_msg(srv, cae_jsonrpc_notification("notifications/progress", params));
}

/* The keeper: once a second, a keep-alive for every running call with a progress token that
 * has been silent for HEARTBEAT_NS. */
/* The first running call due a keep-alive (silent for HEARTBEAT_NS), or NULL. */
static struct job *keepalive_due_locked(struct server *srv, int64_t now)
{
	for (struct job *j = srv->jobs; j; j = j->next)
		if (j->state == JOB_RUNNING && j->progress_token && !j->cancelled && !j->answered &&
		    now - j->last_sent_ns >= HEARTBEAT_NS && j->keepalives < HEARTBEAT_MAX)
			return j;
	return NULL;
}

static void *keeper_main(void *arg)
{
	struct server *srv = arg;
	pthread_mutex_lock(&srv->lock);
	while (!srv->keeper_stop) {
		int64_t now = cae__now_ns();
		struct job *j = keepalive_due_locked(srv, now);
		if (!j) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += 1;
			pthread_cond_timedwait(&srv->keeper_wake, &srv->lock, &ts);
			continue;
		}
		j->keepalives++;
		double progress = j->last_reported + j->keepalives * HEARTBEAT_STEP;
		j->progress_sent = true;
		j->last_progress = progress;
		j->last_sent_ns = now;
		json_t *params = json_pack("{s:O, s:f}", "progressToken", j->progress_token,
					   "progress", progress);
		if (params && j->progress_message) {
			char msg[64];
			snprintf(msg, sizeof(msg), "still running (%lld s)",
				 (long long)((now - j->started_ns) / 1000000000LL));
			json_object_set_new(params, "message", json_string(msg));
		}
		/* written without the lock; the call's answer waits until it is written */
		j->keepalive_busy++;
		pthread_mutex_unlock(&srv->lock);
		if (params)
			send_msg(srv, cae_jsonrpc_notification("notifications/progress", params));
		pthread_mutex_lock(&srv->lock);
		j->keepalive_busy--;
		pthread_cond_broadcast(&srv->keepalive_done);
	}
	pthread_mutex_unlock(&srv->lock);
	return NULL;
}

static json_t *run_list(struct server *srv, struct job *j)
{
	json_t *tools = srv->h->list_tools(srv->h->userdata, j->structured);
	if (!json_is_array(tools)) {
		json_decref(tools);
		slog(srv, "error", "mcp.tools_list_failed", "the handler could not list the tools");
		return cae_jsonrpc_error(j->id, CAE_JSONRPC_INTERNAL_ERROR,
					 "Internal error: could not list the tools", NULL);
	}
	return cae_jsonrpc_result(j->id, json_pack("{s:o}", "tools", tools));
}

static json_t *run_call(struct server *srv, struct job *j)
{
	cae_call_ctx ctx = {
	    .cancel_fd = j->cancel_pipe[0], /* -1: none for a call run inline */
	    .progress = j->progress_token ? progress_cb : NULL,
	    .progress_userdata = j,
	};
	cae_tool_result res = {0};
	cae_error err = {0};
	int r = srv->h->call_tool(srv->h->userdata, j->name, j->args, &ctx, &res, &err);
	int64_t ms = (cae__now_ns() - j->started_ns) / 1000000;
	json_t *resp;
	if (r < 0) {
		slog(srv, r == -ECANCELED ? "info" : "warning", "mcp.tool_call",
		     "tool %s failed after %lld ms: %s", j->name, (long long)ms,
		     err.message[0] ? err.message : strerror(-r));
		resp = cae__mcp_call_error(j->id, j->name, r, &err);
	} else {
		slog(srv, "info", "mcp.tool_call", "tool %s answered in %lld ms%s", j->name,
		     (long long)ms, res.is_error ? " (isError)" : "");
		resp = cae_jsonrpc_result(j->id, cae__mcp_tool_result_json(&res, j->structured));
	}
	cae__mcp_tool_result_release(&res);
	return resp;
}

static void *worker_main(void *arg)
{
	struct server *srv = arg;
	pthread_mutex_lock(&srv->lock);
	for (;;) {
		struct job *j = NULL;
		for (struct job *x = srv->jobs; x; x = x->next)
			if (x->state == JOB_QUEUED) {
				j = x;
				break;
			}
		if (!j) {
			if (srv->stopping)
				break;
			/* Idle until handed a ticket (enqueue counted on this worker) or stopped.
			 */
			srv->idle_workers++;
			while (srv->tickets == 0 && !srv->stopping)
				pthread_cond_wait(&srv->work, &srv->lock);
			if (srv->tickets > 0)
				srv->tickets--;
			else
				srv->idle_workers--;
			continue;
		}
		j->state = JOB_RUNNING;
		srv->nqueued--;
		pthread_mutex_unlock(&srv->lock);

		json_t *resp = j->kind == JOB_CALL ? run_call(srv, j) : run_list(srv, j);

		pthread_mutex_lock(&srv->lock);
		/* no progress after the answer: a keep-alive being written goes first */
		j->answered = true;
		while (j->keepalive_busy)
			pthread_cond_wait(&srv->keepalive_done, &srv->lock);
		unlink_job_locked(srv, j);
		if (j->cancelled) {
			/* MCP: a cancelled request gets no answer. */
			json_decref(resp);
			resp = NULL;
		}
		json_t *out = settle_locked(j->batch, resp);
		pthread_mutex_unlock(&srv->lock);
		if (out)
			send_msg(srv, out);
		job_free(j);
		pthread_mutex_lock(&srv->lock);
	}
	pthread_mutex_unlock(&srv->lock);
	return NULL;
}

#define ID_BUSY "Invalid Request: a request with this id is still running"

static bool id_busy_locked(struct server *srv, json_t *id)
{
	for (struct job *x = srv->jobs; x; x = x->next)
		if (json_equal(x->id, id))
			return true;
	return false;
}

/* Queues a job (stolen) and makes sure a worker will take it. */
static void enqueue(struct server *srv, struct job *j)
{
	const char *busy = NULL;
	pthread_mutex_lock(&srv->lock);
	if (id_busy_locked(srv, j->id))
		busy = ID_BUSY;
	if (!busy && srv->nqueued >= srv->o.max_queued)
		busy = "Server busy: too many requests waiting; retry later";
	/* Large requests (a big patch or file) are held whole until answered: at most two
	 * maximal lines' worth at once, beside the small ones, which the count bounds. */
	if (!busy && j->bytes > BIG_REQUEST && srv->held_bytes > 0 &&
	    srv->held_bytes + j->bytes > 2 * srv->o.max_message_size)
		busy = "Server busy: large requests are still running; retry later";
	bool wake = false;
	if (!busy && srv->idle_workers > 0) {
		/* An idle worker takes it: counted off now, so that the next request does not
		 * count on the same worker before it woke. */
		srv->idle_workers--;
		srv->tickets++;
		wake = true;
	} else if (!busy && srv->nworkers < srv->o.max_calls) {
		int r = pthread_create(&srv->workers[srv->nworkers], NULL, worker_main, srv);
		if (r == 0)
			srv->nworkers++;
		else if (srv->nworkers == 0)
			busy = "Server busy: cannot start a worker thread";
	}
	if (busy) {
		int code = strncmp(busy, "Invalid", 7) == 0 ? CAE_JSONRPC_INVALID_REQUEST
							    : CAE_JSONRPC_SERVER_BUSY;
		pthread_mutex_unlock(&srv->lock);
		reply_error(srv, j->batch, j->id, code, busy);
		if (j->batch) {
			pthread_mutex_lock(&srv->lock);
			j->batch->refs--; /* the reader still holds one: never the last */
			pthread_mutex_unlock(&srv->lock);
		}
		job_free(j);
		return;
	}
	struct job **tail = &srv->jobs;
	while (*tail)
		tail = &(*tail)->next;
	*tail = j;
	srv->njobs++;
	srv->held_bytes += j->bytes;
	srv->nqueued++;
	if (wake)
		pthread_cond_broadcast(&srv->work);
	pthread_mutex_unlock(&srv->lock);
}

static struct job *job_new(struct server *srv, enum job_kind kind, json_t *id, struct batch *b)
{
	struct job *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	j->srv = srv;
	j->kind = kind;
	j->state = JOB_QUEUED;
	/* Jobs own deep copies: nothing is shared between the reader and the workers. */
	j->id = json_deep_copy(id);
	j->cancel_pipe[0] = j->cancel_pipe[1] = -1;
	j->started_ns = cae__now_ns();
	j->last_sent_ns = j->started_ns;
	j->bytes = srv->line_bytes; /* set by the reader, the one thread making jobs */
	pthread_mutex_lock(&srv->lock);
	const char *v = srv->version;
	pthread_mutex_unlock(&srv->lock);
	j->structured = cae_mcp_version_has_structured(v);
	j->progress_message = cae_mcp_version_has_progress_message(v);
	if (b) {
		pthread_mutex_lock(&srv->lock);
		b->refs++;
		pthread_mutex_unlock(&srv->lock);
		j->batch = b;
	}
	return j;
}

/* ---- dispatch ---------------------------------------------------------------------- */

static void handle_initialize(struct server *srv, const cae_jsonrpc_msg *m, struct batch *b)
{
	cae_jsonrpc_err e;
	if (b) {
		reply_error(srv, b, m->id, CAE_JSONRPC_INVALID_REQUEST,
			    "Invalid Request: initialize must not be part of a batch");
		return;
	}
	const char *requested;
	if (cae__mcp_decode_initialize(m->params, &requested, &e) < 0) {
		reply_error(srv, b, m->id, e.code, e.message);
		return;
	}
	const char *v = cae_mcp_negotiate(requested);
	pthread_mutex_lock(&srv->lock);
	srv->version = v;
	pthread_mutex_unlock(&srv->lock);
	slog(srv, "info", "mcp.initialize", "client asked for protocol %.64s, speaking %s",
	     requested, v);
	json_t *result = cae__mcp_initialize_result(v, srv->o.server_name, srv->o.server_version,
						    srv->o.instructions);
	if (result && srv->o.prompts &&
	    json_object_set_new(json_object_get(result, "capabilities"), "prompts",
				json_pack("{s:b}", "listChanged", 0)) < 0) {
		json_decref(result);
		result = NULL;
	}
	reply(srv, b, cae_jsonrpc_result(m->id, result));
}

/* prompts/list and prompts/get: the sections are rendered already, so both are answered
 * here on the reader thread. */
static void handle_prompts_list(struct server *srv, const cae_jsonrpc_msg *m, struct batch *b)
{
	cae_jsonrpc_err e;
	if (cae__mcp_decode_list_params(m->params, &e) < 0) {
		reply_error(srv, b, m->id, e.code, e.message);
		return;
	}
	json_t *list = cae_prompts_list(srv->o.prompts);
	if (!list) {
		reply_error(srv, b, m->id, CAE_JSONRPC_INTERNAL_ERROR,
			    "Internal error: out of memory");
		return;
	}
	reply(srv, b, cae_jsonrpc_result(m->id, json_pack("{s:o}", "prompts", list)));
}

static void handle_prompts_get(struct server *srv, const cae_jsonrpc_msg *m, struct batch *b)
{
	cae_jsonrpc_err e;
	const char *name;
	json_t *args;
	if (cae__mcp_decode_get_prompt(m->params, &name, &args, &e) < 0) {
		reply_error(srv, b, m->id, e.code, e.message);
		return;
	}
	char msg[CAE_ERROR_MSG_MAX + 64];
	if (!cae_prompts_offered(srv->o.prompts, name)) {
		/* An unknown name, or a section whose feature the configuration disables. */
		json_t *list = cae_prompts_list(srv->o.prompts);
		char names[256] = "";
		size_t o = 0, i;
		json_t *p;
		json_array_foreach(list, i, p)
		{
			if (o < sizeof(names))
				o += (size_t)snprintf(
				    names + o, sizeof(names) - o, "%s%s", i ? ", " : "",
				    json_string_value(json_object_get(p, "name")));
		}
		json_decref(list);
		snprintf(msg, sizeof(msg),
			 "Invalid params: unknown prompt \"%.100s\" (prompts: %s)", name,
			 names[0] ? names : "none");
		reply_error(srv, b, m->id, CAE_JSONRPC_INVALID_PARAMS, msg);
		return;
	}
	cae_error err;
	cae_error_clear(&err);
	char *text = NULL;
	int r = 0;
	if (srv->o.prompt_text && json_object_size(args) == 0)
		text = srv->o.prompt_text(srv->o.prompt_userdata, name);
	if (!text)
		r = cae_prompts_get(srv->o.prompts, name, args, &text, &err);
	json_t *result =
	    r == 0 ? cae__mcp_prompt_result(cae_prompts_description(name), text) : NULL;
	free(text);
	if (result) {
		reply(srv, b, cae_jsonrpc_result(m->id, result));
		return;
	}
	bool invalid = r == -EINVAL || r == -ENOENT;
	snprintf(msg, sizeof(msg), "%s: %s", invalid ? "Invalid params" : "Internal error",
		 r < 0 ? err.message : "out of memory");
	reply_error(srv, b, m->id,
		    invalid ? CAE_JSONRPC_INVALID_PARAMS : CAE_JSONRPC_INTERNAL_ERROR, msg);
}

/* Runs a quick call on the reader thread: nothing is copied (the request outlives the
 * call), no worker is woken, no cancel pipe is made. */
static void run_inline(struct server *srv, const cae_jsonrpc_msg *m, const cae_mcp_call_params *p,
		       struct batch *b)
{
	pthread_mutex_lock(&srv->lock);
	bool busy = id_busy_locked(srv, m->id);
	const char *v = srv->version;
	pthread_mutex_unlock(&srv->lock);
	if (busy) {
		reply_error(srv, b, m->id, CAE_JSONRPC_INVALID_REQUEST, ID_BUSY);
		return;
	}
	struct job j = {
	    .srv = srv,
	    .kind = JOB_CALL,
	    .state = JOB_RUNNING,
	    .id = m->id,
	    .name = (char *)p->name, /* borrowed: this job is never freed */
	    .args = p->arguments,
	    .progress_token = p->progress_token,
	    .structured = cae_mcp_version_has_structured(v),
	    .progress_message = cae_mcp_version_has_progress_message(v),
	    .cancel_pipe = {-1, -1},
	    .started_ns = cae__now_ns(),
	};
	reply(srv, b, run_call(srv, &j));
}

static void handle_tools_call(struct server *srv, const cae_jsonrpc_msg *m, struct batch *b)
{
	cae_jsonrpc_err e;
	cae_mcp_call_params p;
	if (cae__mcp_decode_call_params(m->params, &p, &e) < 0) {
		reply_error(srv, b, m->id, e.code, e.message);
		return;
	}
	if (srv->h->call_is_quick && srv->h->call_is_quick(srv->h->userdata, p.name, p.arguments)) {
		run_inline(srv, m, &p, b);
		cae__mcp_call_params_clear(&p);
		return;
	}
	struct job *j = job_new(srv, JOB_CALL, m->id, b);
	if (j) {
		j->name = strdup(p.name);
		j->args = json_deep_copy(p.arguments);
		j->progress_token = p.progress_token ? json_deep_copy(p.progress_token) : NULL;
	}
	bool copied = j && j->id && j->name && j->args && (j->progress_token || !p.progress_token);
	cae__mcp_call_params_clear(&p);
	if (!copied || pipe2(j->cancel_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		reply_error(srv, b, m->id, CAE_JSONRPC_INTERNAL_ERROR,
			    "Internal error: cannot start the call");
		if (j && b) {
			pthread_mutex_lock(&srv->lock);
			b->refs--;
			pthread_mutex_unlock(&srv->lock);
		}
		job_free(j);
		return;
	}
	enqueue(srv, j);
}

static void handle_tools_list(struct server *srv, const cae_jsonrpc_msg *m, struct batch *b)
{
	cae_jsonrpc_err e;
	if (cae__mcp_decode_list_params(m->params, &e) < 0) {
		reply_error(srv, b, m->id, e.code, e.message);
		return;
	}
	struct job *j = job_new(srv, JOB_LIST, m->id, b);
	if (!j || !j->id) {
		if (j && b) {
			pthread_mutex_lock(&srv->lock);
			b->refs--;
			pthread_mutex_unlock(&srv->lock);
		}
		job_free(j);
		reply_error(srv, b, m->id, CAE_JSONRPC_INTERNAL_ERROR,
			    "Internal error: out of memory");
		return;
	}
	enqueue(srv, j);
}

static void handle_notification(struct server *srv, const cae_jsonrpc_msg *m)
{
	if (strcmp(m->method, "notifications/cancelled") == 0) {
		json_t *id = cae__mcp_decode_cancelled(m->params);
		if (id)
			cancel_by_id(srv, id);
		return;
	}
	if (strcmp(m->method, "notifications/initialized") == 0) {
		slog(srv, "debug", "mcp.initialized", "client ready");
		return;
	}
	/* Other notifications (roots/list_changed, progress, ...) need nothing from us. */
}

static void handle_message(struct server *srv, json_t *v, struct batch *b)
{
	cae_jsonrpc_msg m;
	cae_jsonrpc_err e;
	if (cae_jsonrpc_validate(v, &m, &e) < 0) {
		slog(srv, "warning", "mcp.invalid_request", "%s", e.message);
		reply_error(srv, b, m.id, e.code, e.message);
		return;
	}
	switch (m.kind) {
	case CAE_JSONRPC_RESPONSE:
		/* The server sends no requests: an answer to one is for nobody. */
		slog(srv, "debug", "mcp.unexpected_response", "ignored a response");
		return;
	case CAE_JSONRPC_NOTIFICATION:
		handle_notification(srv, &m);
		return;
	case CAE_JSONRPC_REQUEST:
		break;
	}
	if (m.params && !json_is_object(m.params)) {
		reply_error(srv, b, m.id, CAE_JSONRPC_INVALID_PARAMS,
			    "Invalid params: MCP params are an object");
		return;
	}
	pthread_mutex_lock(&srv->lock);
	bool initialized = srv->version != NULL;
	pthread_mutex_unlock(&srv->lock);
	if (strcmp(m.method, "initialize") == 0)
		handle_initialize(srv, &m, b);
	else if (strcmp(m.method, "ping") == 0)
		reply(srv, b, cae_jsonrpc_result(m.id, json_object()));
	else if (!initialized)
		/* MCP: nothing but pings before the initialization (an initialize that failed
		 * leaves the server uninitialized too). */
		reply_error(srv, b, m.id, CAE_JSONRPC_SERVER_NOT_INITIALIZED,
			    "Server not initialized: send initialize first");
	else if (strcmp(m.method, "tools/list") == 0)
		handle_tools_list(srv, &m, b);
	else if (strcmp(m.method, "tools/call") == 0)
		handle_tools_call(srv, &m, b);
	else if (srv->o.prompts && strcmp(m.method, "prompts/list") == 0)
		handle_prompts_list(srv, &m, b);
	else if (srv->o.prompts && strcmp(m.method, "prompts/get") == 0)
		handle_prompts_get(srv, &m, b);
	else {
		char msg[200];
		snprintf(msg, sizeof(msg), "Method not found: %.120s", m.method);
		reply_error(srv, b, m.id, CAE_JSONRPC_METHOD_NOT_FOUND, msg);
	}
}

static void handle_line(struct server *srv, const char *line, size_t len)
{
	json_t *v;
	cae_jsonrpc_err e;
	srv->line_bytes = len;
	if (cae_jsonrpc_parse(line, len, srv->o.max_depth, &v, &e) < 0) {
		slog(srv, "warning", "mcp.parse_error", "%s", e.message);
		reply_error(srv, NULL, NULL, e.code, e.message);
		return;
	}
	if (json_is_object(v)) {
		handle_message(srv, v, NULL);
		json_decref(v);
		return;
	}
	pthread_mutex_lock(&srv->lock);
	const char *version = srv->version;
	pthread_mutex_unlock(&srv->lock);
	if (!cae_mcp_version_has_batches(version)) {
		char msg[160];
		snprintf(msg, sizeof(msg), "Invalid Request: protocol version %s has no batches",
			 version ? version : CAE_MCP_PROTOCOL_LATEST);
		reply_error(srv, NULL, NULL, CAE_JSONRPC_INVALID_REQUEST, msg);
	} else if (json_array_size(v) == 0) {
		reply_error(srv, NULL, NULL, CAE_JSONRPC_INVALID_REQUEST,
			    "Invalid Request: empty batch");
	} else {
		struct batch *b = calloc(1, sizeof(*b));
		json_t *arr = json_array();
		if (!b || !arr) {
			free(b);
			json_decref(arr);
			reply_error(srv, NULL, NULL, CAE_JSONRPC_INTERNAL_ERROR,
				    "Internal error: out of memory");
		} else {
			b->responses = arr;
			b->refs = 1;
			size_t i;
			json_t *elem;
			json_array_foreach(v, i, elem) handle_message(srv, elem, b);
			pthread_mutex_lock(&srv->lock);
			json_t *out = settle_locked(b, NULL);
			pthread_mutex_unlock(&srv->lock);
			if (out)
				send_msg(srv, out);
		}
	}
	json_decref(v);
}

/* ---- the loop ---------------------------------------------------------------------- */

static bool shutdown_requested(const struct server *srv, short revents)
{
	return srv->o.shutdown_fd >= 0 && (revents & (POLLIN | POLLHUP | POLLERR));
}

/* Waits until every job has ended; a shutdown request meanwhile cancels them. */
static void drain(struct server *srv)
{
	bool cancelled = false;
	pthread_mutex_lock(&srv->lock);
	srv->draining = true;
	while (srv->njobs > 0) {
		pthread_mutex_unlock(&srv->lock);
		struct pollfd p[2] = {
		    {.fd = srv->wake[0], .events = POLLIN},
		    {.fd = !cancelled ? srv->o.shutdown_fd : -1, .events = POLLIN},
		};
		int r = poll(p, 2, -1);
		if (r > 0 && (p[0].revents & POLLIN)) {
			char buf[64];
			while (read(srv->wake[0], buf, sizeof(buf)) > 0)
				;
		}
		if (r > 0 && !cancelled && shutdown_requested(srv, p[1].revents)) {
			slog(srv, "info", "mcp.shutdown",
			     "shutting down: cancelling running calls");
			cancel_all(srv);
			cancelled = true;
		}
		pthread_mutex_lock(&srv->lock);
	}
	srv->stopping = true;
	pthread_cond_broadcast(&srv->work);
	pthread_mutex_unlock(&srv->lock);
	for (unsigned i = 0; i < srv->nworkers; i++)
		pthread_join(srv->workers[i], NULL);
	srv->nworkers = 0;
}

/* A line over the limit was skipped: the error carries its id when the framer read one on
 * the way (a request's caller then gets its answer), else null. */
static void oversized(struct server *srv, const cae_jsonrpc_framer *f)
{
	char msg[160];
	snprintf(msg, sizeof(msg), "Invalid Request: message larger than %zu bytes",
		 srv->o.max_message_size);
	slog(srv, "warning", "mcp.oversized_message", "%s", msg);
	json_t *id = cae_jsonrpc_framer_dropped_id(f);
	reply_error(srv, NULL, id, CAE_JSONRPC_INVALID_REQUEST, msg);
	json_decref(id);
}

/* Reads and dispatches until end of input, shutdown or a broken output. */
static int read_loop(struct server *srv, cae_jsonrpc_framer *f, int in_fd, cae_error *err)
{
	for (;;) {
		if (out_broken(srv))
			return cae_error_set(err, -EPIPE, "the client closed its input");
		const char *line;
		size_t len;
		int r = cae_jsonrpc_framer_next(f, &line, &len);
		if (r == 1) {
			handle_line(srv, line, len);
			continue;
		}
		if (r == -E2BIG) {
			oversized(srv, f);
			continue;
		}
		struct pollfd p[2] = {
		    {.fd = in_fd, .events = POLLIN},
		    {.fd = srv->o.shutdown_fd, .events = POLLIN},
		};
		int pr = poll(p, 2, -1);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0)
			return cae_error_set(err, -errno, "poll: %s", strerror(errno));
		if (shutdown_requested(srv, p[1].revents)) {
			slog(srv, "info", "mcp.shutdown",
			     "shutting down: cancelling running calls");
			cancel_all(srv);
			return 0;
		}
		if (!p[0].revents)
			continue;
		long n = cae_jsonrpc_framer_read(f, in_fd);
		if (n == -EAGAIN)
			continue;
		/* a socket client that closed with our answer unread resets the connection */
		if (n == -ECONNRESET)
			return cae_error_set(err, -EPIPE, "the client closed its input");
		if (n < 0)
			return cae_error_set(err, (int)n, "reading the client's messages: %s",
					     strerror((int)-n));
		if (n == 0) {
			while ((r = cae_jsonrpc_framer_finish(f, &line, &len)) != 0) {
				if (r == 1)
					handle_line(srv, line, len);
				else
					oversized(srv, f);
			}
			/* The client is gone or done: nobody waits for the running calls'
			 * answers, and their commands must not run on to their timeouts. */
			slog(srv, "info", "mcp.eof", "end of input: cancelling running calls");
			cancel_all(srv);
			return 0;
		}
	}
}

int cae_mcp_serve(const cae_mcp_handler *h, int in_fd, int out_fd, const cae_mcp_options *opts,
		  cae_error *err)
{
	struct server srv = {.h = h, .out_fd = out_fd, .wake = {-1, -1}};
	if (opts)
		srv.o = *opts;
	else
		srv.o.shutdown_fd = -1;
	if (!srv.o.max_message_size)
		srv.o.max_message_size = CAE_JSONRPC_DEFAULT_MAX_MESSAGE;
	if (!srv.o.max_depth)
		srv.o.max_depth = CAE_JSONRPC_DEFAULT_MAX_DEPTH;
	if (!srv.o.max_calls)
		srv.o.max_calls = DEFAULT_MAX_CALLS;
	if (!srv.o.max_queued)
		srv.o.max_queued = DEFAULT_MAX_QUEUED;
	if (!srv.o.server_name)
		srv.o.server_name = "cae";
	if (!srv.o.server_version)
		srv.o.server_version = CAE_VERSION;
	struct stat st;
	srv.out_is_socket = fstat(out_fd, &st) == 0 && S_ISSOCK(st.st_mode);

	srv.workers = calloc(srv.o.max_calls, sizeof(*srv.workers));
	cae_jsonrpc_framer *f = cae_jsonrpc_framer_new(srv.o.max_message_size);
	if (!srv.workers || !f || pipe2(srv.wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		free(srv.workers);
		cae_jsonrpc_framer_free(f);
		return cae_error_set(err, -ENOMEM, "cannot set up the MCP server");
	}
	pthread_mutex_init(&srv.lock, NULL);
	pthread_mutex_init(&srv.write_lock, NULL);
	pthread_cond_init(&srv.work, NULL);
	pthread_cond_init(&srv.keepalive_done, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&srv.keeper_wake, &ca);
	pthread_condattr_destroy(&ca);
	srv.keeper_started = pthread_create(&srv.keeper, NULL, keeper_main, &srv) == 0;
	if (!srv.keeper_started)
		slog(&srv, "warning", "mcp.no_keepalive",
		     "cannot start the progress keep-alive thread: silent calls send no progress");

	int r = read_loop(&srv, f, in_fd, err);
	if (r < 0)
		cancel_all(&srv);
	drain(&srv);
	if (srv.keeper_started) {
		pthread_mutex_lock(&srv.lock);
		srv.keeper_stop = true;
		pthread_cond_broadcast(&srv.keeper_wake);
		pthread_mutex_unlock(&srv.lock);
		pthread_join(srv.keeper, NULL);
	}
	if (r == 0 && out_broken(&srv))
		r = cae_error_set(err, -EPIPE, "the client closed its input");

	cae_jsonrpc_framer_free(f);
	pthread_cond_destroy(&srv.keeper_wake);
	pthread_cond_destroy(&srv.keepalive_done);
	pthread_cond_destroy(&srv.work);
	pthread_mutex_destroy(&srv.write_lock);
	pthread_mutex_destroy(&srv.lock);
	close(srv.wake[0]);
	close(srv.wake[1]);
	free(srv.workers);
	return r;
}
