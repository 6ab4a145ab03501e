/* The plan a run executes: a list of steps (cae_patch_step), one per command. All-or-nothing
 * patches get theirs from cae_patch_check(), which computes every file's new content before
 * anything is written; continue mode makes one step per command itself, and each step that
 * depends on a file's content is computed, and so checked, by the executor when it runs. */
#include "worker/worker-internal.h"

#include "base/macro.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

static int check_read(void *userdata, const char *path, char **data, size_t *len, cae_error *err)
{
	wk_state *st = userdata;
	_cleanup_free_ char *rel = NULL;
	int r = cae__wk_path_rel(st->root, path, &rel, err);
	if (r < 0)
		return r;
	return st->fs->ops->read(st->fs, rel, st->max_file, data, len, NULL, err);
}

int cae__wk_plan_check(wk_state *st, cae_patch_plan **out, cae_error *err)
{
	cae_patch_fs pfs = {.read = check_read, .userdata = st};
	return cae_patch_check(st->p, &pfs, out, err);
}

/* Every path of every file edit, lexically: NULL, or the first refused (new message). */
static char *refused_path(wk_state *st)
{
	for (size_t i = 0; i < cae_patch_count(st->p); i++) {
		const cae_patch_command *c = cae_patch_get(st->p, i);
		if (c->type != CAE_PATCH_FILE_EDIT)
			continue;
		const char *paths[] = {c->op ? c->op->path : c->target,
				       c->op ? c->op->move_to : NULL};
		for (size_t k = 0; k < 2; k++) {
			_cleanup_free_ char *rel = NULL;
			cae_error e;
			cae_error_clear(&e);
			if (paths[k] && cae__wk_path_rel(st->root, paths[k], &rel, &e) < 0) {
				char *m = NULL;
				if (asprintf(&m, "command %zu: %s", i + 1, e.message) < 0)
					m = NULL;
				return m ? m : strdup("out of memory");
			}
		}
	}
	return NULL;
}

/* Command c as a step of continue mode (what cae_patch_check makes of a command that comes
 * after a shell or git command, whose effect on files cannot be known in advance). */
static int step_of(const cae_patch_command *c, size_t i, cae_patch_step *s, cae_error *err)
{
	const cae_patch_file_op *op = c->op;
	*s = (cae_patch_step){.index = i, .command = c};
	if (c->type != CAE_PATCH_FILE_EDIT) {
		s->kind = CAE_PATCH_STEP_RUN;
		return 0;
	}
	switch (c->action) {
	case CAE_PATCH_CREATE:
	case CAE_PATCH_UPDATE:
		s->kind = CAE_PATCH_STEP_WRITE;
		s->path = c->target;
		s->data = c->content;
		s->len = c->content_len;
		return 0;
	case CAE_PATCH_APPEND:
		s->kind = CAE_PATCH_STEP_APPEND;
		s->path = c->target;
		s->data = c->content;
		s->len = c->content_len;
		return 0;
	case CAE_PATCH_DELETE:
		s->kind = CAE_PATCH_STEP_DELETE;
		s->path = op ? op->path : c->target;
		s->deferred = op && op->nhunks > 0; /* the content must still match */
		return 0;
	case CAE_PATCH_PATCH:
	case CAE_PATCH_MOVE:
		s->kind = CAE_PATCH_STEP_WRITE;
		s->path = op && op->move_to ? op->move_to : op ? op->path : c->target;
		s->old_path = op && op->move_to ? op->path : NULL;
		s->deferred = true;
		return 0;
	default:
		return cae_error_set(err, -EINVAL, "command %zu: unknown file_edit action %s",
				     i + 1, cae_patch_action_name(c->action));
	}
}

int cae__wk_plan_make(wk_state *st, bool all_or_nothing, wk_plan *pl, char **error)
{
	*pl = (wk_plan){.all_or_nothing = all_or_nothing};
	*error = NULL;
	cae_error err;
	cae_error_clear(&err);
	if (all_or_nothing) {
		/* nothing is written when one path is refused */
		*error = refused_path(st);
		if (*error)
			return -EACCES;
		int r = cae__wk_plan_check(st, &pl->checked, &err);
		if (r < 0) {
			*error = strdup(err.message[0] ? err.message : "the patch does not apply");
			return r;
		}
		pl->n = cae_patch_plan_count(pl->checked);
		return 0;
	}
	size_t n = cae_patch_count(st->p);
	pl->steps = calloc(n ? n : 1, sizeof(*pl->steps));
	if (!pl->steps) {
		*error = strdup("out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		int r = step_of(cae_patch_get(st->p, i), i, &pl->steps[i], &err);
		if (r < 0) {
			cae__wk_plan_clear(pl);
			*error = strdup(err.message);
			return r;
		}
	}
	pl->n = n;
	return 0;
}

size_t cae__wk_plan_count(const wk_plan *pl)
{
	return pl->n;
}

const cae_patch_step *cae__wk_plan_step(const wk_plan *pl, size_t i)
{
	if (i >= pl->n)
		return NULL;
	return pl->checked ? cae_patch_plan_step(pl->checked, i) : &pl->steps[i];
}

void cae__wk_plan_clear(wk_plan *pl)
{
	cae_patch_plan_free(pl->checked);
	free(pl->steps);
	*pl = (wk_plan){0};
}
