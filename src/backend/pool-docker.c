/* The docker backend's part of the warm pool (the policy is src/backend/pool.c's): pool
 * members are containers created and started ahead, with their helper as PID 1, so that a
 * prepare skips the engine's slowest steps.
 *
 * A pool container is labelled with its pool's key (a hash of the create body a prepare of
 * its environment would send, minus what is the task's: cae__docker_pool_spec). A prepare
 * whose own body has the same key claims one:
 *
 *   1 take    the container's helper, through a stream on its pool name, makes
 *             CAE_POOL_CLAIM_MARK as the container's user (without a helper: an exec
 *             does, as the same user): mkdir succeeds for one caller only, whatever the
 *             interleaving (a rename alone is no claim: the engine looks the old name up
 *             before it locks the container, so two renames of one name may both succeed,
 *             one after the other). The stream is the prepare's from then on: the one
 *             this process kept since it started the container (pool.c), or a new one,
 *             which costs the one exec the prepare's stream costs anyway.
 *   2 rename  by id, to the task's creating name; from there the prepare goes on as a cold
 *             one (clone, dependencies, protected paths, the final name). The task's
 *             credential target (labels cannot change) is written, root's, in
 *             CAE_POOL_CLAIM_DIR by the prepare's last archive upload, with the protected
 *             paths.
 *
 * Every remover takes a running container first (so that nobody claims what is being
 * removed); one whose take succeeded but that never left the pool (its taker died in
 * between) is removed once it is a minute past its maximum age. Fills create in engine
 * slots (cae__docker_create_started). */
#include "backend/backend-internal.h"

#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/docker.h"
#include "cae/helper.h"
#include "cae/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/banned.h"

#define TAKE_TIMEOUT_MS 30000
#define STUCK_GRACE_S 60 /* taken, never renamed: removed this long past its age */

static const char *label(json_t *c, const char *k)
{
	return json_string_value(json_object_get(json_object_get(c, "Labels"), k));
}

/* The pool name of a list entry (without the engine's '/'), or NULL. */
static const char *pool_name(json_t *c)
{
	const char *n = json_string_value(json_array_get(json_object_get(c, "Names"), 0));
	if (n && *n == '/')
		n++;
	return n && strncmp(n, CAE_POOL_NAME_PREFIX, strlen(CAE_POOL_NAME_PREFIX)) == 0 ? n : NULL;
}

static int list(cae_backend *b, const char *selector, json_t **all, cae_error *err)
{
	json_t *filters =
	    json_pack("{s:[s], s:[s]}", "name", CAE_POOL_NAME_PREFIX, "label", selector);
	int r = cae_docker_container_list(cae__docker_client(b), true, filters, all, err);
	json_decref(filters);
	return r;
}

static void member(json_t *c, cae_pool_member *m)
{
	const char *created = label(c, CAE_DOCKER_LABEL_CREATED);
	const char *st = json_string_value(json_object_get(c, "State"));
	int64_t t = cae__parse_iso8601(created);
	*m = (cae_pool_member){
	    .entry = c,
	    .name = pool_name(c),
	    .id = json_string_value(json_object_get(c, "Id")),
	    .key = label(c, CAE_POOL_LABEL),
	    .environment = label(c, "cae.environment"),
	    .instance = label(c, CAE_LABEL_INSTANCE),
	    .created = t >= 0 ? t : (int64_t)json_integer_value(json_object_get(c, "Created")),
	    .max_age = cae__pool_seconds(label(c, CAE_POOL_LABEL_MAX_AGE)),
	    .state = !st			  ? CAE_POOL_OTHER
		     : strcmp(st, "running") == 0 ? CAE_POOL_RUNNING
		     : strcmp(st, "created") == 0 ? CAE_POOL_STARTING
						  : CAE_POOL_OTHER};
	snprintf(m->created_at, sizeof(m->created_at), "%s", created ? created : "");
	snprintf(m->state_name, sizeof(m->state_name), "%s", st ? st : "");
}

static int create(cae_backend *b, json_t *body, const char *key, const char *name,
		  const char *helper, int cancel_fd, cae_error *err)
{
	json_t *labels = json_object_get(body, "Labels");
	char age_s[24], at[40];
	snprintf(age_s, sizeof(age_s), "%d", b->cfg->command_executor.pool.max_age_seconds);
	cae__iso8601_now(at, sizeof(at));
	json_object_set_new(labels, CAE_POOL_LABEL, json_string(key));
	json_object_set_new(labels, CAE_POOL_LABEL_MAX_AGE, json_string(age_s));
	json_object_set_new(labels, CAE_DOCKER_LABEL_CREATED, json_string(at));
	_cleanup_free_ char *id = NULL;
	/* (its own directory for the proxy's listeners: backend-docker.c) */
	json_t *own = cae__docker_pool_net_body(b, body, name);
	int r = cae__docker_create_started(b, name, own ? own : body, helper, cancel_fd, &id, err);
	json_decref(own);
	return r;
}

/* CAE_POOL_CLAIM_MARK made through the helper's stream m: 0 when this caller made it,
 * -EBUSY when it was there (another caller's), -ENOTCONN when the helper did not run it
 * (a helper that failed the run is not trusted with the claim: an exec decides). */
static int take_through(cae_helper_mux *m)
{
	const char *mk[] = {"mkdir", "--", CAE_POOL_CLAIM_MARK, NULL};
	cae_run_spec spec = {.argv = mk,
			     .cwd = "/",
			     .timeout_ms = TAKE_TIMEOUT_MS,
			     .max_stdout = 4096,
			     .max_stderr = 4096,
			     .cancel_fd = -1};
	cae_run_result res;
	if (cae_helper_mux_run(m, &spec, NULL, NULL, &res, NULL) < 0)
		return -ENOTCONN;
	int r = res.exit_code == 0 ? 0 : -EBUSY;
	cae_run_result_clear(&res);
	return r;
}

/* Step 1 of a claim (see the top): 0 when this caller took the container named name,
 * -EBUSY when another did (or it is gone, or does not run), another -errno when the
 * engine failed. Through the stream this process kept since it started the container when
 * there is one, else a new one (mux NULL: none), else an exec; *how says which
 * ("kept_stream", "stream", "exec"). mux (NULL: the caller wants no stream) gets the stream
 * the take was made through, or NULL when an exec took it. */
static int take(cae_backend *b, const char *name, cae_helper_mux **mux, const char **how)
{
	cae_helper_mux *m = cae__pool_kept_take(b, name);
	int r = m ? take_through(m) : -ENOTCONN;
	*how = "kept_stream";
	if (r == -ENOTCONN && mux) {
		cae_helper_mux_close(m);
		m = NULL;
		*how = "stream";
		r = cae__docker_open_stream(b, name, &m);
		if (r == 0)
			r = take_through(m);
		else if (r != -ENOTCONN)
			return r;
	}
	if (r == 0 && mux) {
		*mux = m;
		return 0;
	}
	cae_helper_mux_close(m);
	if (mux)
		*mux = NULL;
	if (r != -ENOTCONN)
		return r;
	*how = "exec";
	const char *argv[] = {"mkdir", "--", CAE_POOL_CLAIM_MARK, NULL};
	/* as the container's user, as the helper would: the mark is in its scratch directory */
	cae_docker_exec_spec spec = {.argv = argv,
				     .user = NULL,
				     .raw = true,
				     .timeout_ms = TAKE_TIMEOUT_MS,
				     .max_stdout = 4096,
				     .max_stderr = 4096,
				     .cancel_fd = -1};
	cae_run_result res;
	r = cae_docker_exec(cae__docker_client(b), name, &spec, &res, NULL, NULL);
	if (r == -ESRCH || r == -EAGAIN || r == -ENOENT)
		return -EBUSY;
	if (r < 0)
		return r;
	r = res.exit_code == 0 ? 0 : -EBUSY;
	cae_run_result_clear(&res);
	return r;
}

/* Removes m, taken first when it runs: 1 when removed, 0 when left (another caller took it
 * and may still be using it), < 0 on failure. */
static int take_and_remove(cae_backend *b, const cae_pool_member *m, int64_t age, const char **why,
			   cae_error *err)
{
	if (!m->id)
		return 0;
	if (m->state == CAE_POOL_RUNNING) {
		const char *how;
		int r = take(b, m->name, NULL, &how);
		if (r < 0 && r != -EBUSY)
			return cae_error_set(err, r, "cannot take pool container %s", m->name);
		if (r == -EBUSY) {
			/* taken by another; still a pool container long past its age: its
			 * taker died between the take and the rename */
			json_t *ic = NULL;
			const char *n = NULL;
			if (cae_docker_container_inspect(cae__docker_client(b), m->id, &ic, NULL) ==
			    0)
				n = json_string_value(json_object_get(ic, "Name"));
			bool stuck = n && strstr(n, CAE_POOL_NAME_PREFIX) &&
				     age >= m->max_age + STUCK_GRACE_S;
			json_decref(ic);
			if (!stuck)
				return 0;
			*why = "taken but never claimed";
		}
	}
	int r = cae__docker_remove(b, m->id, err);
	return r < 0 ? r : 1;
}

/* A claim's caller: the task's creating name, where the take's stream goes, and what was
 * claimed. */
struct claimer {
	const char *name;
	cae_helper_mux **mux;
	json_t *claimed;
};

static int claim(cae_backend *b, const cae_pool_member *m, void *ctx, json_t *fields,
		 cae_error *err)
{
	struct claimer *c = ctx;
	const char *how = NULL;
	if (!m->id || take(b, m->name, c->mux, &how) != 0)
		return -EBUSY; /* another claimer's */
	json_object_set_new(fields, "taken_through", json_string(how));
	int r = cae_docker_container_rename(cae__docker_client(b), m->id, c->name, err);
	if (r < 0) {
		/* ours, but the task's name is taken (a prepare of the same task): it goes,
		 * and the prepare goes on cold */
		if (c->mux) {
			cae_helper_mux_close(*c->mux);
			*c->mux = NULL;
		}
		(void)cae__docker_remove(b, m->id, NULL);
		return r == -EBUSY ? -EIO : r;
	}
	json_object_set_new(fields, "name", json_string(c->name));
	c->claimed = json_incref(m->entry);
	return 0;
}

int cae__docker_pool_claim(cae_backend *b, const char *key, const char *name, cae_helper_mux **mux,
			   json_t **claimed, cae_error *err)
{
	(void)err;
	struct claimer c = {.name = name, .mux = mux};
	if (cae__pool_claim(b, key, &c) <= 0)
		return 0;
	*claimed = c.claimed;
	return 1;
}

const cae_pool_ops cae__docker_pool_ops = {
    .noun = "container",
    .spec = cae__docker_pool_spec,
    .list = list,
    .member = member,
    .create = create,
    .remove = take_and_remove,
    .claim = claim,
    .open_stream = cae__docker_open_stream,
};
