/* The one execution path of the worker: every step of a plan, in either mode, goes through
 * exec_step(), which computes what a step writes when it depends on the files as they are
 * now, then writes, moves or deletes through a sink. The modes differ only in the sink and
 * in what is kept:
 *   all or nothing  the sink stages every change in one transaction of the file system,
 *                   committed after the last step; the first failure drops them all;
 *   continue mode   the sink changes the files at once (each write itself atomic), and a
 *                   failed step leaves the ones before it in place. */
#include "worker/worker-internal.h"

#include "base/macro.h"
#include "base/timeutil.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/banned.h"

static bool cancel_requested(const wk_state *st)
{
	if (st->o->cancel_fd < 0)
		return false;
	struct pollfd pfd = {.fd = st->o->cancel_fd, .events = POLLIN};
	return poll(&pfd, 1, 0) > 0;
}

/* The files a transaction has staged so far: what later steps of it read. */
typedef struct staged_file {
	char *rel;
	char *data; /* NULL: removed */
	size_t len;
} staged_file;

typedef struct sink {
	bool txn; /* stage in the open transaction; else change the files now */
	staged_file *staged;
	size_t nstaged;
} sink;

static void sink_clear(sink *k)
{
	for (size_t i = 0; i < k->nstaged; i++) {
		free(k->staged[i].rel);
		free(k->staged[i].data);
	}
	free(k->staged);
	k->staged = NULL;
	k->nstaged = 0;
}

static const staged_file *staged_get(const sink *k, const char *rel)
{
	for (size_t i = 0; i < k->nstaged; i++)
		if (strcmp(k->staged[i].rel, rel) == 0)
			return &k->staged[i];
	return NULL;
}

/* Records rel's staged content (data copied; NULL: removed). */
static int staged_put(sink *k, const char *rel, const char *data, size_t len)
{
	staged_file *f = (staged_file *)staged_get(k, rel);
	if (!f) {
		staged_file *nv = realloc(k->staged, (k->nstaged + 1) * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		k->staged = nv;
		f = &k->staged[k->nstaged];
		memset(f, 0, sizeof(*f));
		f->rel = strdup(rel);
		if (!f->rel)
			return -ENOMEM;
		k->nstaged++;
	}
	char *copy = NULL;
	if (data) {
		copy = malloc(len + 1);
		if (!copy)
			return -ENOMEM;
		memcpy(copy, data, len);
		copy[len] = '\0';
	}
	free(f->data);
	f->data = copy;
	f->len = len;
	return 0;
}

/* rel's content as the steps so far left it (staged, or on disk): *data new. mode may be
 * NULL; it is the file's on disk. */
static int sink_read(wk_state *st, const sink *k, const char *rel, char **data, size_t *len,
		     mode_t *mode, cae_error *err)
{
	const staged_file *f = k->txn ? staged_get(k, rel) : NULL;
	if (!f)
		return st->fs->ops->read(st->fs, rel, st->max_file, data, len, mode, err);
	if (!f->data)
		return cae_error_set(err, -ENOENT, "%s: no such file or directory", rel);
	if (mode && st->fs->ops->read(st->fs, rel, st->max_file, NULL, NULL, mode, NULL) < 0)
		*mode = 0644;
	*data = malloc(f->len + 1);
	if (!*data)
		return cae_error_set(err, -ENOMEM, "out of memory");
	memcpy(*data, f->data, f->len);
	(*data)[f->len] = '\0';
	*len = f->len;
	return 0;
}

static int sink_write(wk_state *st, sink *k, const char *rel, const char *data, size_t len,
		      mode_t mode, cae_error *err)
{
	if (!k->txn)
		return st->fs->ops->write(st->fs, rel, data, len, mode, err);
	int r = st->fs->ops->txn_write(st->fs, rel, data, len, mode, err);
	if (r == 0 && staged_put(k, rel, data, len) < 0)
		r = cae_error_set(err, -ENOMEM, "out of memory");
	return r;
}

static int sink_remove(wk_state *st, sink *k, const char *rel, cae_error *err)
{
	if (!k->txn)
		return st->fs->ops->remove(st->fs, rel, err);
	const staged_file *f = staged_get(k, rel);
	if (f && !f->data)
		return cae_error_set(err, -ENOENT, "%s: no such file or directory", rel);
	int r = st->fs->ops->txn_remove(st->fs, rel, err);
	if (r == 0 && staged_put(k, rel, NULL, 0) < 0)
		r = cae_error_set(err, -ENOMEM, "out of memory");
	return r;
}

/* A WRITE: the step's content, or for a deferred one the hunks applied now to the file as it
 * is; for a move, the old file's mode, and the old file removed. */
static int step_write(wk_state *st, sink *k, const cae_patch_step *s, const char *rel,
		      const char *old_rel, wk_outcome *oc, cae_error *err)
{
	const cae_patch_command *c = s->command;
	const cae_patch_file_op *op = c->op;
	bool move = old_rel && strcmp(old_rel, rel) != 0;
	const char *data = s->data;
	size_t len = s->len;
	mode_t mode = WK_MODE_KEEP;
	_cleanup_free_ char *made = NULL;
	int r;
	if (s->deferred) {
		if (!op)
			return cae_error_set(err, -EINVAL, "%s: no hunks to apply", c->target);
		_cleanup_free_ char *old = NULL;
		size_t old_len = 0;
		mode_t old_mode = 0644;
		r = sink_read(st, k, old_rel ? old_rel : rel, &old, &old_len, &old_mode, err);
		if (r < 0)
			return r;
		r = cae_patch_apply_hunks(old, old_len, op, &made, &len, err);
		if (r < 0)
			return r;
		data = made;
		if (move)
			mode = old_mode;
	} else if (move) {
		if (st->fs->ops->read(st->fs, old_rel, st->max_file, NULL, NULL, &mode, NULL) < 0)
			mode = 0644;
	}
	r = sink_write(st, k, rel, data, len, mode, err);
	if (r == 0 && move)
		r = sink_remove(st, k, old_rel, err);
	if (r < 0)
		return r;
	size_t hunks = op ? op->nhunks : 0;
	if (move)
		cae__wk_report(oc, "Moved %s to %s (%zu hunk%s applied, %zu bytes)", s->old_path,
			       s->path, hunks, hunks == 1 ? "" : "s", len);
	else if (op && (c->action == CAE_PATCH_PATCH || c->action == CAE_PATCH_MOVE))
		cae__wk_report(oc, "Patched %s (%zu hunk%s applied, %zu bytes)", s->path, hunks,
			       hunks == 1 ? "" : "s", len);
	else
		cae__wk_report(oc, "File %s written successfully (%zu bytes)", s->path, len);
	return 0;
}

/* An APPEND: the file as it is (or nothing) plus the step's bytes. */
static int step_append(wk_state *st, sink *k, const cae_patch_step *s, const char *rel,
		       wk_outcome *oc, cae_error *err)
{
	_cleanup_free_ char *old = NULL;
	size_t old_len = 0;
	int r = sink_read(st, k, rel, &old, &old_len, NULL, err);
	if (r == -ENOENT) {
		cae_error_clear(err);
		old_len = 0;
	} else if (r < 0) {
		return r;
	}
	if (old_len > SIZE_MAX - s->len - 1)
		return cae_error_set(err, -EFBIG, "%s: file too large", s->path);
	_cleanup_free_ char *buf = malloc(old_len + s->len + 1);
	if (!buf)
		return cae_error_set(err, -ENOMEM, "out of memory");
	if (old_len)
		memcpy(buf, old, old_len);
	memcpy(buf + old_len, s->data, s->len);
	r = sink_write(st, k, rel, buf, old_len + s->len, WK_MODE_KEEP, err);
	if (r == 0)
		cae__wk_report(oc, "Appended %zu bytes to %s", s->len, s->path);
	return r;
}

/* A DELETE; a deferred one (a unified diff's deletion holds the content) first checks that
 * the content still matches. */
static int step_delete(wk_state *st, sink *k, const cae_patch_step *s, const char *rel,
		       wk_outcome *oc, cae_error *err)
{
	if (s->deferred) {
		_cleanup_free_ char *old = NULL, *rest = NULL;
		size_t old_len = 0, rest_len = 0;
		int r = sink_read(st, k, rel, &old, &old_len, NULL, err);
		if (r < 0)
			return r;
		r = cae_patch_apply_hunks(old, old_len, s->command->op, &rest, &rest_len, err);
		if (r < 0)
			return r;
	}
	int r = sink_remove(st, k, rel, err);
	if (r == 0)
		cae__wk_report(oc, "File %s deleted", s->path);
	return r;
}

/* Runs step s through the sink; fills oc. */
static void exec_step(wk_state *st, sink *k, const cae_patch_step *s, wk_outcome *oc)
{
	if (s->kind == CAE_PATCH_STEP_RUN) {
		cae__wk_exec_command(st, s->command, oc);
		return;
	}
	cae_error err;
	cae_error_clear(&err);
	_cleanup_free_ char *rel = NULL, *old_rel = NULL;
	int r = cae__wk_path_rel(st->root, s->path, &rel, &err);
	if (r == 0 && s->old_path)
		r = cae__wk_path_rel(st->root, s->old_path, &old_rel, &err);
	oc->success = true;
	if (r == 0) {
		switch (s->kind) {
		case CAE_PATCH_STEP_WRITE:
			r = step_write(st, k, s, rel, old_rel, oc, &err);
			break;
		case CAE_PATCH_STEP_APPEND:
			r = step_append(st, k, s, rel, oc, &err);
			break;
		case CAE_PATCH_STEP_DELETE:
			r = step_delete(st, k, s, rel, oc, &err);
			break;
		default:
			r = cae_error_set(&err, -EINVAL, "unexpected step");
		}
	}
	if (r < 0)
		cae__wk_fail(oc, "%s", err.message[0] ? err.message : strerror(-r));
}

bool cae__wk_plan_run(wk_state *st, const wk_plan *pl, bool stop_on_error, char **error)
{
	*error = NULL;
	size_t n = cae__wk_plan_count(pl);
	sink k = {.txn = pl->all_or_nothing};
	cae_error err;
	cae_error_clear(&err);
	if (k.txn && st->fs->ops->txn_begin(st->fs, &err) < 0) {
		if (asprintf(error, "the patch was not applied: %s", err.message) < 0)
			*error = NULL;
		if (!*error)
			*error = strdup("out of memory");
		return true;
	}
	/* all or nothing: the results are recorded once the outcome of the whole is known */
	wk_outcome *held = NULL;
	int64_t *held_ms = NULL;
	if (k.txn) {
		held = calloc(n ? n : 1, sizeof(*held));
		held_ms = calloc(n ? n : 1, sizeof(*held_ms));
		if (!held || !held_ms) {
			free(held);
			free(held_ms);
			st->fs->ops->txn_abort(st->fs);
			*error = strdup("out of memory");
			return true;
		}
	}
	bool failed = false;
	size_t done = 0;
	for (; done < n; done++) {
		if (cancel_requested(st))
			st->cancelled = true;
		if (st->cancelled || (failed && stop_on_error))
			break;
		const cae_patch_step *s = cae__wk_plan_step(pl, done);
		wk_outcome one;
		wk_outcome *oc = k.txn ? &held[done] : &one;
		cae__wk_outcome_init(oc, st->max_output);
		int64_t t0 = cae__now_ns();
		exec_step(st, &k, s, oc);
		int64_t ms = (cae__now_ns() - t0) / 1000000;
		failed = failed || !oc->success;
		if (!k.txn) {
			cae__wk_record(st, s->index, s->command, oc, ms);
			cae__wk_outcome_clear(oc);
			continue;
		}
		held_ms[done] = ms;
		if (failed) {
			if (asprintf(error,
				     "command %zu failed: %s; nothing was changed (the patch is "
				     "applied all or nothing)",
				     done + 1, oc->error.data ? oc->error.data : "") < 0)
				*error = NULL;
			if (!*error)
				*error = strdup("a command failed");
			done++;
			break;
		}
	}
	if (k.txn) {
		if (failed || st->cancelled) {
			st->fs->ops->txn_abort(st->fs);
			if (!*error)
				*error = strdup("cancelled; nothing was changed");
		} else if (st->fs->ops->txn_commit(st->fs, &err) < 0) {
			/* the file system's message says what state the files are in */
			*error =
			    strdup(err.message[0] ? err.message : "the patch could not be applied");
		}
		for (size_t i = 0; i < done; i++) {
			const cae_patch_step *s = cae__wk_plan_step(pl, i);
			cae__wk_record(st, s->index, s->command, &held[i], held_ms[i]);
			cae__wk_outcome_clear(&held[i]);
		}
		free(held);
		free(held_ms);
	} else if (st->cancelled) {
		*error = strdup("cancelled: the remaining commands were not run");
	}
	sink_clear(&k);
	st->skipped += n - done;
	return failed || *error != NULL;
}
