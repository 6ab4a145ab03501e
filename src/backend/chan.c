/* The channel table of the backends whose environments run a cae-helper (chan.h): one
 * stream per environment per process, shared by its commands, and the paths of a command,
 * an edit and a file operation over it, so that the docker and kubernetes backends differ
 * only in how they reach their helper and what they do without one. */
#include "backend/chan.h"

#include "backend/pkgcache.h"

#include "base/chase.h"
#include "base/macro.h"
#include "cae/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

/* The longest credential target ("host user forge") an environment may record. */
#define TARGET_MAX 399
#define CHAN_HEARTBEAT_MAX_S 10 /* a stream helper's heartbeat, at most (cae__chan_heartbeat) */

static void chan_free(cae_chan *c)
{
	if (c) {
		cae__chan_net_close_forwards(c);
		cae_helper_mux_close(c->m);
		cae__pkgcache_serve_stop(c);
		cae__chan_net_free(c);
		free(c->target);
		free(c->forge);
		free(c->uuid);
		free(c->why);
		free(c);
	}
}

void cae__chan_table_init(cae_chan_table *t, cae_backend *b, const cae_chan_ops *ops)
{
	*t = (cae_chan_table){.b = b, .ops = ops};
	pthread_mutex_init(&t->lock, NULL);
}

void cae__chan_table_fini(cae_chan_table *t)
{
	while (t->list) {
		cae_chan *c = t->list;
		t->list = c->next;
		chan_free(c);
	}
	pthread_mutex_destroy(&t->lock);
}

/* git's credential request from a command in the environment: the token reaches git's
 * memory in the environment, never its process environment, files or configuration. */
static char *chan_credential(void *ud, const char *request, size_t len)
{
	cae_chan *c = ud;
	cae_backend *b = c->t->b;
	return cae__git_credential_answer(b->cfg, b->log, c->uuid, c->target, request, len);
}

void cae__chan_credentials(cae_chan *c, const char *target)
{
	if (!c->m || !target || strlen(target) > TARGET_MAX || !(c->target = strdup(target)))
		return;
	cae_helper_mux_set_credentials(c->m, chan_credential, c);
}

void cae__chan_unanswered(cae_chan *c, const cae_error *e)
{
	cae_backend *b = c->t->b;
	char why[CAE_ERROR_MSG_MAX + 128], event[64];
	snprintf(why, sizeof(why), "the %s's cae-helper did not answer (%s)", c->t->ops->what,
		 e->message);
	snprintf(event, sizeof(event), "%s.helper_unavailable", b->ops->name);
	c->why = strdup(why);
	cae_log_fields(b->log, CAE_LOG_WARN, event, json_pack("{s:s}", "task_uuid", c->uuid), "%s",
		       why);
}

/* The channel of uuid for one use (a reference held): the live one of the table, or a new
 * one (a dead one met on the way is retired). NULL with *r (and err) set when it could not
 * be opened. */
static cae_chan *chan_acquire(cae_chan_table *t, const char *uuid, bool preparing, int *r,
			      cae_error *err)
{
	cae_chan *dead = NULL;
	pthread_mutex_lock(&t->lock);
	for (cae_chan **pp = &t->list; *pp; pp = &(*pp)->next) {
		cae_chan *c = *pp;
		if (strcmp(c->uuid, uuid) != 0)
			continue;
		if (c->m ? cae_helper_mux_alive(c->m) : !t->ops->reopen_plain) {
			c->refs++;
			pthread_mutex_unlock(&t->lock);
			return c;
		}
		*pp = c->next; /* a stream that ended, or no helper to look for again: retired */
		c->retired = true;
		if (c->refs == 0)
			dead = c;
		break;
	}
	pthread_mutex_unlock(&t->lock);
	chan_free(dead);
	cae_chan *c = calloc(1, sizeof(*c));
	if (!c || !(c->uuid = strdup(uuid))) {
		free(c);
		*r = cae_error_set(err, -ENOMEM, "out of memory");
		return NULL;
	}
	c->t = t;
	*r = t->ops->open(t->b, c, preparing, err);
	if (*r < 0) {
		chan_free(c);
		return NULL;
	}
	if (c->m)
		cae__chan_net_start(c);
	pthread_mutex_lock(&t->lock);
	c->refs = 1;
	c->next = t->list;
	t->list = c;
	pthread_mutex_unlock(&t->lock);
	return c;
}

/* Ends a use of c; retire: its stream is not to be used again. */
static void chan_release(cae_chan_table *t, cae_chan *c, bool retire)
{
	pthread_mutex_lock(&t->lock);
	if (retire && !c->retired) {
		for (cae_chan **pp = &t->list; *pp; pp = &(*pp)->next) {
			if (*pp == c) {
				*pp = c->next;
				break;
			}
		}
		c->retired = true;
	}
	bool last = --c->refs == 0 && c->retired;
	pthread_mutex_unlock(&t->lock);
	if (last)
		chan_free(c);
}

void cae__chan_forget(cae_chan_table *t, const char *uuid)
{
	cae_chan *unused = NULL;
	pthread_mutex_lock(&t->lock);
	for (cae_chan **pp = &t->list; *pp;) {
		cae_chan *c = *pp;
		if (strcmp(c->uuid, uuid) != 0) {
			pp = &c->next;
			continue;
		}
		*pp = c->next;
		c->retired = true;
		if (c->refs == 0) {
			c->next = unused;
			unused = c;
		}
	}
	pthread_mutex_unlock(&t->lock);
	while (unused) {
		cae_chan *c = unused;
		unused = c->next;
		chan_free(c);
	}
}

/* A stream failed (r) during a call on uuid's channel c: c is released, retired, and the
 * error says that the environment stopped or went (ops->gone), or else is r. */
static int chan_failed(cae_chan_table *t, const char *uuid, cae_chan *c, int r, cae_error *err)
{
	chan_release(t, c, true);
	cae_error e = {0};
	int g = t->ops->gone(t->b, uuid, &e);
	return g < 0 ? cae_error_set(err, g, "%s", e.message) : r;
}

/* The channel of uuid could not be had (r): the error as the backend reports it. */
static int unusable(cae_chan_table *t, const char *uuid, int r, cae_error *err)
{
	return t->ops->unusable ? t->ops->unusable(t->b, r, uuid, err) : r;
}

/* A command's working directory as an absolute path below the workspace (relative ones
 * start at the project, '\' is accepted as a separator); where it really leads is checked
 * in the environment. */
static int resolve_cwd(const cae_chan_ops *ops, const char *cwd, char **out, cae_error *err)
{
	if (!cwd || !*cwd)
		cwd = ops->project;
	int r = cae__path_lexical(ops->workspace, ops->project, cwd, strlen(cwd),
				  CAE_PATH_BACKSLASH | CAE_PATH_ABSOLUTE, out);
	if (r == -ENOMEM)
		return r;
	if (r < 0)
		return cae_error_set(err, -ENOTDIR,
				     "working directory is outside the workspace: %s", cwd);
	return 0;
}

/* One command through the helper of *cp. A stream found dead before the command was taken
 * (-EPIPE) is replaced once (the command did not run); one that ends during the command is
 * reported: the environment stopped or went, or the helper was killed. Returns 1 when the
 * replacement has no helper (*cp held: the caller runs the command otherwise), else the
 * command's result with *cp released. */
static int helper_run(cae_chan_table *t, const char *uuid, bool preparing, cae_chan **cp,
		      const cae_exec_request *req, const char *cwd, cae_run_result *res,
		      cae_error *err)
{
	const cae_chan_ops *ops = t->ops;
	cae_run_spec spec = cae__backend_run_spec(req, cwd, NULL);
	int r = cae_helper_mux_run((*cp)->m, &spec, req->extra_env, ops->workspace, res, err);
	if (r == -EPIPE) {
		chan_release(t, *cp, true);
		*cp = chan_acquire(t, uuid, preparing, &r, err);
		if (!*cp)
			return r;
		if (!(*cp)->m)
			return 1;
		r = cae_helper_mux_run((*cp)->m, &spec, req->extra_env, ops->workspace, res, err);
	}
	if (r == -ECONNRESET || r == -ETIMEDOUT || r == -EPIPE || r == -EPROTO) {
		r = chan_failed(t, uuid, *cp, r == -EPIPE ? -ECONNRESET : r, err);
		if (ops->failed_note && (r == -ECONNRESET || r == -ETIMEDOUT || r == -EPROTO))
			return cae_error_set(err, r, "%s; %s", err ? err->message : "",
					     ops->failed_note);
		return r;
	}
	if (r == 0)
		cae__chan_net_report(*cp, res);
	chan_release(t, *cp, false);
	return r;
}

int cae__chan_exec(cae_chan_table *t, const char *uuid, bool preparing, const cae_exec_request *req,
		   cae_run_result *res, cae_error *err)
{
	const cae_chan_ops *ops = t->ops;
	if (!cae_task_uuid_valid(uuid))
		return cae_error_set(err, -EINVAL, "invalid task uuid");
	_cleanup_free_ char *cwd = NULL;
	int r = resolve_cwd(ops, req->cwd, &cwd, err);
	if (r < 0)
		return r;
	cae_chan *c = chan_acquire(t, uuid, preparing, &r, err);
	if (!c)
		return unusable(t, uuid, r, err);
	if (c->m) {
		r = helper_run(t, uuid, preparing, &c, req, cwd, res, err);
		if (r != 1)
			return r;
	}
	/* No helper: the backend's own way, with no live input (a command waiting for it
	 * would wait forever). */
	if (req->live && req->live->stdin_fd >= 0) {
		if (c->why)
			r = cae_error_set(err, -EOPNOTSUPP,
					  "%s: a command with live input needs it", c->why);
		else
			r = cae_error_set(err, -EOPNOTSUPP,
					  "this environment's %s has no cae-helper: a command with "
					  "live input needs it",
					  ops->what);
		chan_release(t, c, false);
		return r;
	}
	r = ops->plain(t->b, uuid, req, cwd, res, err);
	if (r == 0 && c->why &&
	    asprintf(&res->warning, "%s: the command ran as %s", c->why, ops->plain_how) < 0)
		res->warning = NULL;
	chan_release(t, c, false);
	return r;
}

/* uuid's channel for a call that needs the helper: NULL with *r the error when it could
 * not be had or has no helper (-EOPNOTSUPP: only commands have a way around it). */
static cae_chan *helper_for(cae_chan_table *t, const char *uuid, int *r, cae_error *err)
{
	cae_chan *c = chan_acquire(t, uuid, false, r, err);
	if (!c) {
		*r = unusable(t, uuid, *r, err);
		return NULL;
	}
	if (c->m)
		return c;
	if (c->why)
		*r = cae_error_set(err, -EOPNOTSUPP, "%s", c->why);
	else
		*r = cae_error_set(err, -EOPNOTSUPP,
				   "this environment's %s has no cae-helper (it was prepared where "
				   "cae-helper-static was missing)",
				   t->ops->what);
	chan_release(t, c, false);
	return NULL;
}

cae_chan *cae__chan_helper_for(cae_chan_table *t, const char *uuid, int *r, cae_error *err)
{
	return helper_for(t, uuid, r, err);
}

void cae__chan_release(cae_chan_table *t, cae_chan *c)
{
	chan_release(t, c, false);
}

/* The end of a call (r) on uuid's channel c: a stream that failed retires it. */
static int helper_done(cae_chan_table *t, const char *uuid, cae_chan *c, int r, cae_error *err)
{
	if (r == -ECONNRESET || r == -ETIMEDOUT || r == -EPROTO)
		return chan_failed(t, uuid, c, r, err);
	chan_release(t, c, false);
	return r;
}

int cae__chan_edit(cae_chan_table *t, const char *uuid, const cae_editor_limits *limits,
		   const cae_editor_request *req, cae_editor_result *res, cae_error *err)
{
	int r;
	cae_chan *c = helper_for(t, uuid, &r, err);
	if (!c)
		return r;
	r = cae_helper_mux_edit(c->m, t->ops->project, limits, req, res, err);
	return helper_done(t, uuid, c, r, err);
}

int cae__chan_fs(cae_chan_table *t, const char *uuid, const cae_fs_request *q, cae_fs_reply *rep,
		 cae_error *err)
{
	int r;
	cae_chan *c = helper_for(t, uuid, &r, err);
	if (!c)
		return r;
	r = cae_helper_mux_fs(c->m, q, rep, err);
	return helper_done(t, uuid, c, r, err);
}

void cae__chan_heartbeat(const cae_config *cfg, char *out, size_t size)
{
	int life = cfg->command_executor.docker.helper_lifetime_seconds;
	int beat = life > 0 ? life / 3 : CHAN_HEARTBEAT_MAX_S;
	snprintf(out, size, "%d", MAX(1, MIN(beat, CHAN_HEARTBEAT_MAX_S)));
}
