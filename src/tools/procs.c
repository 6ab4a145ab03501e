/* Process sessions: commands that outlive one tool call (a dev server, a watcher, a REPL, a
 * long test run). Each runs on a thread of its own through cae_backend_exec with live io
 * (cae/runner.h), so it gets the environment, confinement, policy and caps of any command on
 * every backend; what it writes goes into a bounded buffer that the process tools read from,
 * its stdin is a pipe they write to, and its cancel fd stops its whole tree.
 *
 * A session never outlives its environment: the session ends its sessions before it cleans up
 * or prepares the task again (cae__procs_end_env), a watcher thread ends those whose
 * environment is gone or was replaced behind the session's back (another process's cleanup,
 * `cae gc`), and the table's end (the MCP session's) ends them all. */
#include "tools/tools-internal.h"

#include "base/macro.h"
#include "base/timeutil.h"
#include "base/utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/banned.h"

/* How often the watcher asks whether the environments of running sessions still exist. */
#define WATCH_INTERVAL_MS 2000
/* How long ending a session waits for its command to be gone (the runner's grace, then
 * SIGKILL of the tree, then the drain, with room to spare). */
#define END_WAIT_MS 30000

typedef enum proc_state {
	PROC_RUNNING,
	PROC_EXITED,
	PROC_KILLED,
	PROC_TIMED_OUT,
	PROC_FAILED,
} proc_state;

static const char *const state_names[] = {"running", "exited", "killed", "timed_out", "failed"};

struct proc {
	struct proc *next;
	cae__procs *table;
	unsigned id;
	cae_backend *backend; /* borrowed: the session's, which outlive the table's threads */
	char *task_uuid;
	char *env_created; /* the environment's created_at when it started (NULL: unknown) */
	char *command;
	char *cwd;
	int64_t timeout_ms;
	char started_at[40];
	int64_t started_ns, ended_ns;
	pthread_t thread;
	int in_r, in_w;		/* stdin: the command reads in_r; -1 when closed */
	int cancel_r, cancel_w; /* a byte on cancel_w stops the command's tree */
	int sig_r, sig_w;	/* a byte on sig_w: a signal to the command (cae_live_io) */
	/* under the table's lock */
	char *buf; /* output not yet read: stdout and stderr as they came */
	size_t len;
	uint64_t total;	  /* bytes written by the command */
	uint64_t dropped; /* bytes dropped unread since the last read */
	proc_state state;
	bool kill_requested;
	int exit_code, term_signal;
	char *error;		/* PROC_FAILED: why */
	char *warning;		/* how it ran, when worth saying */
	json_t *network_denied; /* refused at its end, not read yet (NULL: none) */
};

struct cae__procs {
	pthread_mutex_t lock;
	pthread_cond_t cond; /* any output, end, or stop */
	struct proc *list;
	unsigned next_id;
	size_t buffer_size;
	int max_per_env;
	cae_log *log;
	pthread_t watcher;
	bool watcher_started;
	bool stopping;
};

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void proc_free(struct proc *p)
{
	if (!p)
		return;
	close_fd(&p->in_r);
	close_fd(&p->in_w);
	close_fd(&p->cancel_r);
	close_fd(&p->cancel_w);
	close_fd(&p->sig_r);
	close_fd(&p->sig_w);
	free(p->task_uuid);
	free(p->env_created);
	free(p->command);
	free(p->cwd);
	free(p->buf);
	free(p->error);
	free(p->warning);
	json_decref(p->network_denied);
	free(p);
}

cae__procs *cae__procs_new(const cae_config *cfg, cae_log *log)
{
	cae__procs *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	pthread_mutex_init(&t->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->cond, &ca);
	pthread_condattr_destroy(&ca);
	t->buffer_size = (size_t)cfg->command_executor.sessions.buffer_size;
	t->max_per_env = cfg->command_executor.sessions.max_per_environment;
	t->log = log;
	t->next_id = 1;
	return t;
}

static void cond_wait_until(cae__procs *t, int64_t deadline_ns)
{
	struct timespec ts = {deadline_ns / 1000000000LL, deadline_ns % 1000000000LL};
	pthread_cond_timedwait(&t->cond, &t->lock, &ts);
}

/* Asks p's command to stop (lock held). */
static void request_kill_locked(struct proc *p)
{
	if (p->state != PROC_RUNNING || p->kill_requested)
		return;
	p->kill_requested = true;
	if (p->cancel_w >= 0)
		(void)!write(p->cancel_w, "k", 1);
}

/* ---- the command's thread ---- */

/* Appends output (the command's thread, or the helper channel's reader): the newest is kept,
 * the oldest dropped past the buffer size, a quarter at a time so that a chatty command does
 * not move the buffer for every piece. */
static void on_output(void *ud, int stream, const char *data, size_t n)
{
	(void)stream;
	struct proc *p = ud;
	cae__procs *t = p->table;
	pthread_mutex_lock(&t->lock);
	p->total += n;
	size_t cap = t->buffer_size;
	if (n >= cap) {
		p->dropped += p->len + (n - cap);
		data += n - cap;
		n = cap;
		p->len = 0;
	} else if (p->len + n > cap) {
		size_t drop = MAX(p->len + n - cap, cap / 4);
		drop = MIN(drop, p->len);
		memmove(p->buf, p->buf + drop, p->len - drop);
		p->len -= drop;
		p->dropped += drop;
	}
	memcpy(p->buf + p->len, data, n);
	p->len += n;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

static void *proc_main(void *arg)
{
	struct proc *p = arg;
	cae__procs *t = p->table;
	const char *argv[] = {"sh", "-c", p->command, NULL};
	cae_live_io io = {.output = on_output, .ud = p, .stdin_fd = p->in_r, .signal_fd = p->sig_r};
	/* The result's own copy of the output is not used: everything came through io. */
	cae_exec_request req = {
	    .argv = argv,
	    .cwd = p->cwd,
	    .timeout_ms = p->timeout_ms,
	    .max_stdout = 4096,
	    .max_stderr = 4096,
	    .cancel_fd = p->cancel_r,
	    .live = &io,
	};
	cae_run_result res;
	cae_error err = {0};
	int r = cae_backend_exec(p->backend, p->task_uuid, &req, &res, &err);
	pthread_mutex_lock(&t->lock);
	if (r < 0 && p->kill_requested) {
		p->state = PROC_KILLED; /* its environment went while it ran */
		p->exit_code = -1;
		p->error = strdup(err.message[0] ? err.message : strerror(-r));
	} else if (r < 0) {
		p->state = PROC_FAILED;
		p->exit_code = -1;
		p->error = strdup(err.message[0] ? err.message : strerror(-r));
	} else {
		p->state = res.cancelled       ? PROC_KILLED
			   : res.timed_out     ? PROC_TIMED_OUT
			   : p->kill_requested ? PROC_KILLED
					       : PROC_EXITED;
		p->exit_code = res.timed_out ? 124 : res.exit_code;
		p->term_signal = res.term_signal;
		p->warning = res.warning ? strdup(res.warning) : NULL;
		p->network_denied =
		    res.network_denied ? json_loads(res.network_denied, 0, NULL) : NULL;
		cae_run_result_clear(&res);
	}
	p->ended_ns = cae__now_ns();
	/* nothing reads its stdin any more: writes fail instead of filling a pipe */
	close_fd(&p->in_r);
	close_fd(&p->in_w);
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
	cae_log_fields(t->log, CAE_LOG_INFO, "process.end",
		       json_pack("{s:i, s:s, s:s, s:i, s:I}", "session_id", (int)p->id, "task_uuid",
				 p->task_uuid, "state", state_names[p->state], "exit_code",
				 p->exit_code, "duration_ms",
				 (json_int_t)((p->ended_ns - p->started_ns) / 1000000)),
		       NULL);
	return NULL;
}

/* ---- the watcher ---- */

struct watch_item {
	unsigned id;
	cae_backend *backend;
	char *uuid;
	char *created;
};

/* Whether the environment a session started in is still there (and the same one). */
static bool env_gone(const struct watch_item *w)
{
	cae_env_info info;
	cae_error err = {0};
	int r = cae_backend_info(w->backend, w->uuid, &info, &err);
	if (r == -ENOENT)
		return true;
	if (r < 0)
		return false; /* an engine that did not answer now is not a removal */
	bool replaced = w->created && info.created_at && strcmp(w->created, info.created_at) != 0;
	cae_env_info_clear(&info);
	return replaced;
}

static void *watch_main(void *arg)
{
	cae__procs *t = arg;
	pthread_mutex_lock(&t->lock);
	while (!t->stopping) {
		cond_wait_until(t, cae__now_ns() + WATCH_INTERVAL_MS * 1000000LL);
		if (t->stopping)
			break;
		size_t n = 0;
		for (struct proc *p = t->list; p; p = p->next)
			n += p->state == PROC_RUNNING && !p->kill_requested;
		if (n == 0)
			continue;
		struct watch_item *items = calloc(n, sizeof(*items));
		size_t k = 0;
		for (struct proc *p = t->list; p && items; p = p->next)
			if (p->state == PROC_RUNNING && !p->kill_requested)
				items[k++] = (struct watch_item){
				    p->id, p->backend, strdup(p->task_uuid),
				    p->env_created ? strdup(p->env_created) : NULL};
		pthread_mutex_unlock(&t->lock);
		bool *gone = calloc(k ? k : 1, sizeof(bool));
		for (size_t i = 0; i < k && gone; i++)
			gone[i] = items[i].uuid && env_gone(&items[i]);
		pthread_mutex_lock(&t->lock);
		for (size_t i = 0; i < k; i++) {
			for (struct proc *p = t->list; p && gone && gone[i]; p = p->next)
				if (p->id == items[i].id) {
					cae_log_fields(t->log, CAE_LOG_INFO, "process.env_gone",
						       json_pack("{s:i, s:s}", "session_id",
								 (int)p->id, "task_uuid",
								 p->task_uuid),
						       NULL);
					request_kill_locked(p);
				}
			free(items[i].uuid);
			free(items[i].created);
		}
		free(gone);
		free(items);
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

/* ---- the table's operations ---- */

static struct proc *find_locked(cae__procs *t, unsigned id)
{
	for (struct proc *p = t->list; p; p = p->next)
		if (p->id == id)
			return p;
	return NULL;
}

/* Session id with the table locked; NULL (unlocked, err set) when there is none. */
static struct proc *lock_find(cae__procs *t, unsigned id, cae_error *err)
{
	pthread_mutex_lock(&t->lock);
	struct proc *p = find_locked(t, id);
	if (!p) {
		pthread_mutex_unlock(&t->lock);
		cae_error_set(err, -ENOENT, "no process session p%u", id);
	}
	return p;
}

/* Removes finished sessions of uuid beyond keep, oldest first (lock held; their threads have
 * ended or are ending: joined here). */
static void prune_finished_locked(cae__procs *t, const char *uuid, int keep)
{
	int seen = 0;
	for (struct proc **pp = &t->list; *pp;) {
		struct proc *p = *pp;
		if (strcmp(p->task_uuid, uuid) != 0 || p->state == PROC_RUNNING) {
			pp = &p->next;
			continue;
		}
		/* the list is newest first: the ones past keep are the oldest */
		if (++seen <= keep) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		pthread_join(p->thread, NULL);
		proc_free(p);
	}
}

static int make_pipe(int fds[2], bool nonblock_write)
{
	if (pipe2(fds, O_CLOEXEC) < 0)
		return -errno;
	if (nonblock_write)
		(void)fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK);
	return 0;
}

int cae__procs_start(cae__procs *t, const cae__proc_start *o, unsigned *id, cae_error *err)
{
	pthread_mutex_lock(&t->lock);
	int running = 0;
	for (struct proc *p = t->list; p; p = p->next)
		running += p->state == PROC_RUNNING && strcmp(p->task_uuid, o->task_uuid) == 0;
	bool stopping = t->stopping;
	pthread_mutex_unlock(&t->lock);
	if (stopping)
		return cae_error_set(err, -ESHUTDOWN, "the session is ending");
	if (running >= t->max_per_env)
		return cae_error_set(err, -EMFILE,
				     "this environment already runs %d process sessions, the "
				     "maximum (command_executor.sessions.max_per_environment): "
				     "wait for one or kill one first",
				     running);
	struct proc *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->in_r = p->in_w = p->cancel_r = p->cancel_w = p->sig_r = p->sig_w = -1;
	p->table = t;
	p->backend = o->backend;
	p->timeout_ms = o->timeout_ms;
	p->task_uuid = strdup(o->task_uuid);
	p->command = strdup(o->command);
	p->cwd = o->cwd ? strdup(o->cwd) : NULL;
	p->env_created = o->env_created ? strdup(o->env_created) : NULL;
	p->buf = malloc(t->buffer_size);
	int fds[2], r;
	if (!p->task_uuid || !p->command || (o->cwd && !p->cwd) ||
	    (o->env_created && !p->env_created) || !p->buf) {
		proc_free(p);
		return -ENOMEM;
	}
	if ((r = make_pipe(fds, true)) < 0) {
		proc_free(p);
		return cae_error_set(err, r, "pipe: %s", strerror(-r));
	}
	p->in_r = fds[0];
	p->in_w = fds[1];
	if ((r = make_pipe(fds, false)) < 0) {
		proc_free(p);
		return cae_error_set(err, r, "pipe: %s", strerror(-r));
	}
	p->cancel_r = fds[0];
	p->cancel_w = fds[1];
	if ((r = make_pipe(fds, true)) < 0) {
		proc_free(p);
		return cae_error_set(err, r, "pipe: %s", strerror(-r));
	}
	p->sig_r = fds[0];
	p->sig_w = fds[1];
	cae__iso8601_now(p->started_at, sizeof(p->started_at));
	p->started_ns = cae__now_ns();

	pthread_mutex_lock(&t->lock);
	if (!t->watcher_started && pthread_create(&t->watcher, NULL, watch_main, t) == 0)
		t->watcher_started = true;
	p->id = t->next_id++;
	if (pthread_create(&p->thread, NULL, proc_main, p) != 0) {
		pthread_mutex_unlock(&t->lock);
		proc_free(p);
		return cae_error_set(err, -EAGAIN, "cannot start a thread for the session");
	}
	p->next = t->list;
	t->list = p;
	/* finished sessions are kept for their output and exit code, as many as may run */
	prune_finished_locked(t, p->task_uuid, t->max_per_env);
	*id = p->id;
	pthread_mutex_unlock(&t->lock);
	cae_log_fields(t->log, CAE_LOG_INFO, "process.start",
		       json_pack("{s:i, s:s}", "session_id", (int)*id, "task_uuid", o->task_uuid),
		       NULL);
	return 0;
}

/* The session's state as the tools show it (lock held). */
static json_t *status_locked(const struct proc *p)
{
	int64_t end = p->state == PROC_RUNNING ? cae__now_ns() : p->ended_ns;
	char sid[16];
	snprintf(sid, sizeof(sid), "p%u", p->id);
	json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:b}", "session_id", sid,
			      "command", p->command, "task_uuid", p->task_uuid, "state",
			      state_names[p->state], "started_at", p->started_at, "duration_ms",
			      (json_int_t)((end - p->started_ns) / 1000000), "unread_bytes",
			      (json_int_t)p->len, "stdin_open", p->in_w >= 0);
	if (!j)
		return NULL;
	json_object_set_new(j, "exit_code",
			    p->state == PROC_RUNNING || p->state == PROC_FAILED
				? json_null()
				: json_integer(p->exit_code));
	if (p->term_signal)
		json_object_set_new(j, "signal", json_integer(p->term_signal));
	if (p->error)
		json_object_set_new(j, "error", json_string(p->error));
	if (p->warning)
		json_object_set_new(j, "warning", json_string(p->warning));
	return j;
}

/* Takes the next page of unread output (lock held): at most max_chars characters, cut after
 * a line when a line ends in it, a character cut short at the end held back while the
 * command runs. Adds output, dropped_bytes and more to j. */
static void take_page_locked(struct proc *p, size_t max_chars, const cae_secrets *secrets,
			     json_t *j)
{
	size_t avail = p->state == PROC_RUNNING ? cae__utf8_floor(p->buf, p->len) : p->len;
	/* a character is a valid sequence or one invalid byte (which becomes U+FFFD) */
	size_t take = 0, chars = 0;
	while (take < avail && chars < max_chars) {
		size_t l = cae__utf8_seq_len((const unsigned char *)p->buf + take, avail - take);
		take += l ? l : 1;
		chars++;
	}
	if (take < avail) {
		char *nl = memrchr(p->buf, '\n', take);
		if (nl)
			take = (size_t)(nl - p->buf) + 1;
	}
	size_t clean_len;
	_cleanup_free_ char *clean = cae__utf8_sanitize(p->buf, take, &clean_len);
	size_t masked_len = 0;
	_cleanup_free_ char *masked =
	    clean ? cae_secrets_maskn(secrets, clean, clean_len, &masked_len) : NULL;
	if (!masked)
		take = 0; /* out of memory: the output stays for the next read */
	json_object_set_new(j, "output", json_stringn(masked ? masked : "", masked_len));
	json_object_set_new(j, "dropped_bytes", json_integer((json_int_t)p->dropped));
	memmove(p->buf, p->buf + take, p->len - take);
	p->len -= take;
	p->dropped = 0;
	json_object_set_new(j, "more", json_boolean(p->len > 0));
	json_object_set_new(j, "unread_bytes", json_integer((json_int_t)p->len));
}

/* Adds the entries of more ([{host, port, count}], stolen) to *into, counts of the same host
 * and port summed. */
static void merge_denied(json_t **into, json_t *more)
{
	if (!json_is_array(more)) {
		json_decref(more);
		return;
	}
	if (!*into) {
		*into = more;
		return;
	}
	size_t i;
	json_t *m;
	json_array_foreach(more, i, m)
	{
		const char *host = json_string_value(json_object_get(m, "host"));
		json_int_t port = json_integer_value(json_object_get(m, "port"));
		json_t *same = NULL, *e;
		size_t k;
		json_array_foreach(*into, k, e)
		{
			const char *h = json_string_value(json_object_get(e, "host"));
			if (host && h && strcmp(h, host) == 0 &&
			    json_integer_value(json_object_get(e, "port")) == port)
				same = e;
		}
		if (same)
			json_object_set_new(
			    same, "count",
			    json_integer(json_integer_value(json_object_get(same, "count")) +
					 json_integer_value(json_object_get(m, "count"))));
		else
			json_array_append(*into, m);
	}
	json_decref(more);
}

json_t *cae__procs_read(cae__procs *t, unsigned id, const cae__proc_read *o,
			const cae_secrets *secrets, cae_error *err)
{
	struct proc *p = lock_find(t, id, err);
	if (!p)
		return NULL;
	int64_t deadline = cae__now_ns() + o->wait_ms * 1000000LL;
	for (;;) {
		bool ready = o->until_exit
				 ? p->state != PROC_RUNNING
				 : p->len > 0 || p->dropped > 0 || p->state != PROC_RUNNING;
		if (ready || t->stopping || cae__now_ns() >= deadline)
			break;
		cond_wait_until(t, deadline);
	}
	json_t *j = status_locked(p);
	if (j && o->page)
		take_page_locked(p, o->max_chars, secrets, j);
	/* what the environment's network proxy refused: since the last read or command */
	json_t *denied = j ? p->network_denied : NULL;
	if (j)
		p->network_denied = NULL;
	cae_backend *backend = p->backend;
	char *uuid = j ? strdup(p->task_uuid) : NULL;
	pthread_mutex_unlock(&t->lock);
	if (uuid)
		merge_denied(&denied, cae_backend_network_denied(backend, uuid));
	free(uuid);
	if (j && denied)
		json_object_set_new(j, "network_denied", denied);
	else
		json_decref(denied);
	if (!j)
		cae_error_set(err, -ENOMEM, "out of memory");
	return j;
}

json_t *cae__procs_write(cae__procs *t, unsigned id, const char *data, size_t len, bool close_stdin,
			 cae_error *err)
{
	struct proc *p = lock_find(t, id, err);
	if (!p)
		return NULL;
	if (p->in_w < 0) {
		pthread_mutex_unlock(&t->lock);
		cae_error_set(err, -EPIPE, "process session p%u: %s", id,
			      p->state == PROC_RUNNING ? "its stdin is closed" : "it has ended");
		return NULL;
	}
	/* The pipe takes what it can without waiting: a command that does not read its input
	 * must not hold the call. */
	size_t done = 0;
	while (done < len) {
		ssize_t w = write(p->in_w, data + done, len - done);
		if (w > 0)
			done += (size_t)w;
		else if (w < 0 && errno == EINTR)
			continue;
		else
			break;
	}
	if (close_stdin && done == len)
		close_fd(&p->in_w);
	json_t *j = status_locked(p);
	if (j) {
		json_object_set_new(j, "written_bytes", json_integer((json_int_t)done));
		if (done < len)
			json_object_set_new(
			    j, "note",
			    json_sprintf("%zu of %zu bytes were written: the command is not "
					 "reading its input (write the rest later)%s",
					 done, len, close_stdin ? "; stdin stays open" : ""));
	}
	pthread_mutex_unlock(&t->lock);
	if (!j)
		cae_error_set(err, -ENOMEM, "out of memory");
	return j;
}

json_t *cae__procs_signal(cae__procs *t, unsigned id, int sig, cae_error *err)
{
	if (sig < 1 || sig > 64) {
		cae_error_set(err, -EINVAL, "no signal %d", sig);
		return NULL;
	}
	struct proc *p = lock_find(t, id, err);
	if (!p)
		return NULL;
	bool sent = false;
	if (p->state == PROC_RUNNING && !p->kill_requested && p->sig_w >= 0) {
		unsigned char b = (unsigned char)sig;
		sent = write(p->sig_w, &b, 1) == 1;
	}
	json_t *j = status_locked(p);
	pthread_mutex_unlock(&t->lock);
	if (!j) {
		cae_error_set(err, -ENOMEM, "out of memory");
		return NULL;
	}
	json_object_set_new(j, "signal_sent", json_boolean(sent));
	return j;
}

json_t *cae__procs_kill(cae__procs *t, unsigned id, cae_error *err)
{
	struct proc *p = lock_find(t, id, err);
	if (!p)
		return NULL;
	request_kill_locked(p);
	int64_t deadline = cae__now_ns() + END_WAIT_MS * 1000000LL;
	while (p->state == PROC_RUNNING && cae__now_ns() < deadline)
		cond_wait_until(t, deadline);
	json_t *j = status_locked(p);
	pthread_mutex_unlock(&t->lock);
	if (!j)
		cae_error_set(err, -ENOMEM, "out of memory");
	return j;
}

json_t *cae__procs_list(cae__procs *t)
{
	json_t *a = json_array();
	pthread_mutex_lock(&t->lock);
	/* the list is newest first: each goes in front, so the array is oldest first */
	for (struct proc *p = t->list; p && a; p = p->next)
		json_array_insert_new(a, 0, status_locked(p));
	pthread_mutex_unlock(&t->lock);
	return a;
}

int cae__procs_max_per_env(const cae__procs *t)
{
	return t->max_per_env;
}

/* Stops the running sessions that match (uuid NULL: all) and waits for them to end. */
static void end_matching(cae__procs *t, const char *uuid)
{
	pthread_mutex_lock(&t->lock);
	for (struct proc *p = t->list; p; p = p->next)
		if (!uuid || strcmp(p->task_uuid, uuid) == 0)
			request_kill_locked(p);
	int64_t deadline = cae__now_ns() + END_WAIT_MS * 1000000LL;
	for (;;) {
		bool any = false;
		for (struct proc *p = t->list; p; p = p->next)
			any |=
			    p->state == PROC_RUNNING && (!uuid || strcmp(p->task_uuid, uuid) == 0);
		if (!any || cae__now_ns() >= deadline)
			break;
		cond_wait_until(t, deadline);
	}
	pthread_mutex_unlock(&t->lock);
}

char *cae__procs_running_text(cae__procs *t, const char *task_uuid)
{
	if (!t || !task_uuid)
		return NULL;
	char text[512];
	size_t used = 0;
	int n = 0;
	pthread_mutex_lock(&t->lock);
	for (struct proc *p = t->list; p; p = p->next) {
		if (p->state != PROC_RUNNING || strcmp(p->task_uuid, task_uuid) != 0)
			continue;
		if (n++ < 3 && used < sizeof(text)) {
			int w = snprintf(text + used, sizeof(text) - used, "%sp%u: %.60s",
					 n > 1 ? ", " : "", p->id, p->command);
			used += w > 0 ? (size_t)w : 0;
		}
	}
	pthread_mutex_unlock(&t->lock);
	if (n == 0)
		return NULL;
	char *out = NULL;
	if (asprintf(&out, "%d running process session%s (%.400s%s)", n, n == 1 ? "" : "s", text,
		     n > 3 ? ", ..." : "") < 0)
		return NULL;
	return out;
}

void cae__procs_end_env(cae__procs *t, const char *task_uuid)
{
	if (t && task_uuid)
		end_matching(t, task_uuid);
}

void cae__procs_free(cae__procs *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	t->stopping = true;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
	end_matching(t, NULL);
	if (t->watcher_started)
		pthread_join(t->watcher, NULL);
	/* every command thread is joined before the backends it uses go */
	while (t->list) {
		struct proc *p = t->list;
		t->list = p->next;
		pthread_join(p->thread, NULL);
		proc_free(p);
	}
	pthread_cond_destroy(&t->cond);
	pthread_mutex_destroy(&t->lock);
	free(t);
}
