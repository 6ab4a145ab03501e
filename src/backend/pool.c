/* The docker backend's warm pool (command_executor.pool): containers created and started
 * ahead, with their helper as PID 1, so that a prepare skips the engine's slowest steps.
 *
 * A pool container is named coding-agent-pool-<key>-<random> and labelled with its pool's
 * key (a hash of the create body a prepare of its environment would send, minus what is the
 * task's: cae__docker_pool_spec), its environment, its creation time and its maximum age;
 * it carries no task, no credential and no token. A prepare whose own body has the same key
 * claims one:
 *
 *   1 take    the container's helper, through a stream opened on its pool name, makes
 *             CAE_POOL_CLAIM_MARK as the container's user (without a helper: an exec
 *             does): mkdir succeeds for one caller only, whatever the interleaving (a
 *             rename alone is no claim: the engine looks the old name up before it locks
 *             the container, so two renames of one name may both succeed, one after the
 *             other). The stream is the prepare's from then on: the take costs the one
 *             exec the prepare's stream costs anyway.
 *   2 rename  by id, to the task's creating name; from there the prepare goes on as a cold
 *             one (clone, dependencies, protected paths, the final name). The task's
 *             credential target (labels cannot change) is written, root's, in
 *             CAE_POOL_CLAIM_DIR by the prepare's last archive upload, with the protected
 *             paths.
 *
 * A container past its maximum age, or that does not run, is never handed out: claims,
 * fills, `cae pool drain` and `cae gc` take it first (so that nobody claims what is being
 * removed) and remove it. One whose take succeeded but that never left the pool (its taker
 * died in between) is removed once it is a minute past its maximum age.
 *
 * Fills run in engine slots (cae__docker_create_started); one filler per pool key and
 * state directory at a time (a lock file), so that two fillers do not overfill.
 *
 * The public entry points serve the kubernetes backend's pool too: its own steps are in
 * src/backend/pool-kubernetes.c. */
#include "backend/backend-internal.h"

#include "base/fs.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/docker.h"
#include "cae/helper.h"
#include "cae/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/banned.h"

#define TAKE_TIMEOUT_MS 30000
#define STUCK_GRACE_S 60    /* taken, never renamed: removed this long past its age */
#define CREATED_GRACE_S 300 /* created, never started: a filler died (or is slow) */

static bool is_docker(const cae_backend *b)
{
	return strcmp(b->ops->name, "docker") == 0;
}

static bool is_kubernetes(const cae_backend *b)
{
	return strcmp(b->ops->name, "kubernetes") == 0;
}

#define NO_POOL "the warm pool needs the docker or the kubernetes backend"

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

static int64_t created_of(json_t *c)
{
	int64_t t = cae__parse_iso8601(label(c, CAE_DOCKER_LABEL_CREATED));
	return t >= 0 ? t : (int64_t)json_integer_value(json_object_get(c, "Created"));
}

/* The container's own maximum age (its label), else fallback. */
static int64_t max_age_of(json_t *c, int64_t fallback)
{
	const char *v = label(c, CAE_POOL_LABEL_MAX_AGE);
	long long n = v ? strtoll(v, NULL, 10) : 0;
	return n > 0 ? (int64_t)n : fallback;
}

static bool running(json_t *c)
{
	const char *st = json_string_value(json_object_get(c, "State"));
	return st && strcmp(st, "running") == 0;
}

bool cae__pool_wanted(const cae_config *cfg, const char *environment)
{
	const __typeof__(cfg->command_executor.pool) *pool = &cfg->command_executor.pool;
	if (pool->size <= 0 || !environment)
		return false;
	if (pool->environments.n == 0)
		return strcmp(environment, cfg->command_executor.default_environment) == 0;
	for (size_t i = 0; i < pool->environments.n; i++)
		if (strcmp(pool->environments.items[i], environment) == 0)
			return true;
	return false;
}

/* The pooled environments of cfg: n, and the i-th. */
static size_t n_pooled(const cae_config *cfg)
{
	if (cfg->command_executor.pool.size <= 0)
		return 0;
	size_t n = cfg->command_executor.pool.environments.n;
	return n ? n : 1;
}

static const char *pooled(const cae_config *cfg, size_t i)
{
	const cae_config_strlist *l = &cfg->command_executor.pool.environments;
	return l->n ? l->items[i] : cfg->command_executor.default_environment;
}

/* Pool containers of key (NULL: of every pool), running or not, oldest first. */
static int list_pool(cae_backend *b, const char *key, json_t **out, cae_error *err)
{
	char lf[64 + CAE_POOL_KEY_MAX];
	snprintf(lf, sizeof(lf), "%s%s%s", CAE_POOL_LABEL, key ? "=" : "", key ? key : "");
	json_t *filters = json_pack("{s:[s], s:[s]}", "name", CAE_POOL_NAME_PREFIX, "label", lf);
	json_t *all = NULL;
	int r = cae_docker_container_list(cae__docker_client(b), true, filters, &all, err);
	json_decref(filters);
	if (r < 0)
		return r;
	*out = json_array();
	size_t i;
	json_t *c;
	json_array_foreach(all, i, c)
	{
		if (!pool_name(c))
			continue;
		size_t at = json_array_size(*out);
		while (at > 0 && created_of(json_array_get(*out, at - 1)) > created_of(c))
			at--;
		json_array_insert(*out, at, c);
	}
	json_decref(all);
	return 0;
}

/* Step 1 of a claim (see the top): 0 when this caller took the container named name,
 * -EBUSY when another did (or it is gone, or does not run), another -errno when the
 * engine failed. mux (NULL: take with an exec) gets the stream the take was made through,
 * or NULL when its helper did not answer and an exec took it. */
static int take(cae_backend *b, const char *name, cae_helper_mux **mux)
{
	if (mux) {
		int r = cae__docker_take_stream(b, name, mux);
		if (r != -ENOTCONN)
			return r;
		*mux = NULL;
	}
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
	int r = cae_docker_exec(cae__docker_client(b), name, &spec, &res, NULL, NULL);
	if (r == -ESRCH || r == -EAGAIN || r == -ENOENT)
		return -EBUSY;
	if (r < 0)
		return r;
	r = res.exit_code == 0 ? 0 : -EBUSY;
	cae_run_result_clear(&res);
	return r;
}

static void log_removed(cae_backend *b, json_t *c, const char *why, int64_t age)
{
	cae_log_fields(b->log, CAE_LOG_INFO, "pool.removed",
		       json_pack("{s:s?, s:s?, s:s, s:I}", "container", pool_name(c), "pool",
				 label(c, CAE_POOL_LABEL), "reason", why, "age_s", (json_int_t)age),
		       NULL);
}

/* Removes pool container c, taken first when it runs (why: for the log). 1 when removed,
 * 0 when left (another caller took it and may still be using it), < 0 on failure. */
static int take_and_remove(cae_backend *b, json_t *c, int64_t now, int64_t max_age, const char *why,
			   cae_error *err)
{
	const char *name = pool_name(c);
	const char *id = json_string_value(json_object_get(c, "Id"));
	int64_t age = now - created_of(c);
	if (!name || !id)
		return 0;
	if (running(c)) {
		int r = take(b, name, NULL);
		if (r < 0 && r != -EBUSY)
			return cae_error_set(err, r, "cannot take pool container %s", name);
		if (r == -EBUSY) {
			/* taken by another; still a pool container long past its age: its
			 * taker died between the take and the rename */
			json_t *ic = NULL;
			const char *n = NULL;
			if (cae_docker_container_inspect(cae__docker_client(b), id, &ic, NULL) == 0)
				n = json_string_value(json_object_get(ic, "Name"));
			bool stuck =
			    n && strstr(n, CAE_POOL_NAME_PREFIX) && age >= max_age + STUCK_GRACE_S;
			json_decref(ic);
			if (!stuck)
				return 0;
			why = "taken but never claimed";
		}
	}
	int r = cae__docker_remove(b, id, err);
	if (r < 0)
		return r;
	log_removed(b, c, why, age);
	return 1;
}

int cae__pool_claim(cae_backend *b, const char *key, const char *name, cae_helper_mux **mux,
		    json_t **claimed, cae_error *err)
{
	(void)err;
	json_t *all = NULL;
	cae_error e = {0};
	if (list_pool(b, key, &all, &e) < 0) {
		cae_log_event(b->log, CAE_LOG_WARN, "pool.claim_failed", "%s", e.message);
		return 0;
	}
	int64_t now = (int64_t)time(NULL);
	int64_t max_age = b->cfg->command_executor.pool.max_age_seconds;
	int found = 0;
	size_t i;
	json_t *c;
	json_array_foreach(all, i, c)
	{
		const char *pn = pool_name(c);
		const char *id = json_string_value(json_object_get(c, "Id"));
		if (!running(c) || !pn || !id)
			continue;
		int64_t age = now - created_of(c);
		if (age >= max_age || age < 0) {
			/* never handed out: taken (so that nobody else gets it) and removed */
			if (take_and_remove(b, c, now, max_age, "past its maximum age", &e) < 0)
				cae_log_event(b->log, CAE_LOG_WARN, "pool.remove_failed", "%s",
					      e.message);
			continue;
		}
		if (take(b, pn, mux) != 0)
			continue; /* another claimer's */
		int r = cae_docker_container_rename(cae__docker_client(b), id, name, &e);
		if (r < 0) {
			/* ours, but the task's name is taken (a prepare of the same task): it
			 * goes, and the prepare goes on cold */
			cae_log_event(b->log, CAE_LOG_WARN, "pool.claim_failed", "%s", e.message);
			if (mux) {
				cae_helper_mux_close(*mux);
				*mux = NULL;
			}
			(void)cae__docker_remove(b, id, NULL);
			break;
		}
		cae_log_fields(b->log, CAE_LOG_INFO, "pool.claimed",
			       json_pack("{s:s, s:s, s:s, s:I}", "container", pn, "name", name,
					 "pool", key, "age_s", (json_int_t)age),
			       NULL);
		*claimed = json_incref(c);
		found = 1;
		break;
	}
	json_decref(all);
	return found;
}

static bool cancelled(int fd)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	return fd >= 0 && poll(&pfd, 1, 0) > 0;
}

/* The fill lock of key (one filler at a time per state directory): an fd holding it, -1
 * when there is no state directory to lock in (filled without one), -EBUSY when another
 * filler holds it. */
int cae__pool_fill_lock(cae_backend *b, const char *key)
{
	const char *state = b->cfg->command_executor.state_dir;
	if (!state || state[0] != '/')
		return -1;
	_cleanup_free_ char *dir = cae__path_join(state, "pool");
	char path[PATH_MAX];
	if (!dir || cae__mkdir_p(dir, 0700) < 0 ||
	    snprintf(path, sizeof(path), "%s/%s.lock", dir, key) >= (int)sizeof(path))
		return -1;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -1;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		close(fd);
		return -EBUSY;
	}
	return fd;
}

/* Fills environment's pool: what may not be handed out goes, new ones come until size. */
static int fill_env(cae_backend *b, const char *environment, int cancel_fd, int *created,
		    cae_error *err)
{
	const cae_config *cfg = b->cfg;
	json_t *body = NULL;
	char key[CAE_POOL_KEY_MAX];
	_cleanup_free_ char *helper = NULL;
	int r = cae__docker_pool_spec(b, environment, &body, key, &helper, err);
	if (r < 0)
		return r;
	int lock = cae__pool_fill_lock(b, key);
	if (lock == -EBUSY) {
		json_decref(body);
		return 0; /* another process fills this pool now */
	}
	json_t *all = NULL;
	r = list_pool(b, key, &all, err);
	int64_t now = (int64_t)time(NULL);
	int64_t max_age = cfg->command_executor.pool.max_age_seconds;
	int live = 0;
	size_t i;
	json_t *c;
	json_array_foreach(r == 0 ? all : NULL, i, c)
	{
		int64_t age = now - created_of(c);
		const char *st = json_string_value(json_object_get(c, "State"));
		const char *why = NULL;
		if (running(c) && age >= max_age)
			why = "past its maximum age";
		else if (!running(c) && st && strcmp(st, "created") == 0 && age < CREATED_GRACE_S)
			continue; /* being filled by another process */
		else if (!running(c))
			why = "not running";
		if (!why) {
			live++;
			continue;
		}
		cae_error e = {0};
		if (take_and_remove(b, c, now, max_age, why, &e) < 0)
			cae_log_event(b->log, CAE_LOG_WARN, "pool.remove_failed", "%s", e.message);
	}
	json_decref(all);
	json_t *labels = json_object_get(body, "Labels");
	char age_s[24], at[40];
	snprintf(age_s, sizeof(age_s), "%d", cfg->command_executor.pool.max_age_seconds);
	json_object_set_new(labels, CAE_POOL_LABEL, json_string(key));
	json_object_set_new(labels, CAE_POOL_LABEL_MAX_AGE, json_string(age_s));
	while (r == 0 && live < cfg->command_executor.pool.size) {
		if (cancelled(cancel_fd)) {
			r = cae_error_set(err, -ECANCELED, "pool fill cancelled");
			break;
		}
		unsigned char rnd[4];
		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
			r = cae_error_set(err, -EIO, "getrandom failed");
			break;
		}
		char name[96];
		snprintf(name, sizeof(name), CAE_POOL_NAME_PREFIX "%s-%02x%02x%02x%02x", key,
			 rnd[0], rnd[1], rnd[2], rnd[3]);
		cae__iso8601_now(at, sizeof(at));
		json_object_set_new(labels, CAE_DOCKER_LABEL_CREATED, json_string(at));
		_cleanup_free_ char *id = NULL;
		int64_t t0 = cae__now_ms();
		r = cae__docker_create_started(b, name, body, helper, cancel_fd, &id, err);
		if (r < 0) {
			cae_error_prefix(err, "pool");
			break;
		}
		live++;
		(*created)++;
		cae_log_fields(b->log, CAE_LOG_INFO, "pool.created",
			       json_pack("{s:s, s:s, s:s, s:I}", "container", name, "environment",
					 environment, "pool", key, "ms",
					 (json_int_t)(cae__now_ms() - t0)),
			       NULL);
	}
	json_decref(body);
	if (lock >= 0)
		close(lock);
	return r;
}

int cae_backend_pool_fill(cae_backend *b, int cancel_fd, int *created, cae_error *err)
{
	*created = 0;
	if (!is_docker(b) && !is_kubernetes(b))
		return cae_error_set(err, -EOPNOTSUPP, NO_POOL);
	int r = 0;
	for (size_t i = 0; i < n_pooled(b->cfg) && r == 0; i++)
		r = is_docker(b)
			? fill_env(b, pooled(b->cfg, i), cancel_fd, created, err)
			: cae__k8s_pool_fill_env(b, pooled(b->cfg, i), cancel_fd, created, err);
	return r;
}

void cae__pool_maintain(cae_backend *b)
{
	if ((!is_docker(b) && !is_kubernetes(b)) || n_pooled(b->cfg) == 0)
		return;
	int n = 0;
	cae_error e = {0};
	if (cae_backend_pool_fill(b, -1, &n, &e) < 0)
		cae_log_event(b->log, CAE_LOG_WARN, "pool.fill_failed", "%s", e.message);
}

int64_t cae__pool_period_ms(const cae_backend *b)
{
	if ((!is_docker(b) && !is_kubernetes(b)) || n_pooled(b->cfg) == 0)
		return 0;
	return (int64_t)b->cfg->command_executor.pool.max_age_seconds * 500;
}

/* The keys of cfg's pools, as a JSON object (key -> environment). */
static json_t *own_keys(cae_backend *b)
{
	json_t *keys = json_object();
	for (size_t i = 0; i < n_pooled(b->cfg); i++) {
		json_t *body = NULL;
		char key[CAE_POOL_KEY_MAX];
		char *helper = NULL;
		if ((is_docker(b)
			 ? cae__docker_pool_spec(b, pooled(b->cfg, i), &body, key, &helper, NULL)
			 : cae__k8s_pool_spec(b, pooled(b->cfg, i), &body, key, &helper, NULL)) ==
		    0)
			json_object_set_new(keys, key, json_string(pooled(b->cfg, i)));
		json_decref(body);
		free(helper);
	}
	return keys;
}

int cae_backend_pool_status(cae_backend *b, json_t **out, cae_error *err)
{
	if (is_kubernetes(b)) {
		json_t *keys = own_keys(b);
		int r = cae__k8s_pool_status(b, keys, out, err);
		json_decref(keys);
		return r;
	}
	if (!is_docker(b))
		return cae_error_set(err, -EOPNOTSUPP, NO_POOL);
	json_t *all = NULL;
	int r = list_pool(b, NULL, &all, err);
	if (r < 0)
		return r;
	json_t *keys = own_keys(b);
	int64_t now = (int64_t)time(NULL);
	int64_t fallback = b->cfg->command_executor.pool.max_age_seconds;
	*out = json_array();
	size_t i;
	json_t *c;
	json_array_foreach(all, i, c)
	{
		const char *key = label(c, CAE_POOL_LABEL);
		int64_t age = now - created_of(c), max_age = max_age_of(c, fallback);
		json_array_append_new(
		    *out, json_pack("{s:s?, s:s?, s:s?, s:s?, s:s?, s:I, s:I, s:s?, s:b, s:b}",
				    "name", pool_name(c), "container_id",
				    json_string_value(json_object_get(c, "Id")), "environment",
				    label(c, "cae.environment"), "key", key, "created_at",
				    label(c, CAE_DOCKER_LABEL_CREATED), "age_s", (json_int_t)age,
				    "max_age_s", (json_int_t)max_age, "state",
				    json_string_value(json_object_get(c, "State")), "expired",
				    age >= max_age, "this_config",
				    key && json_object_get(keys, key) != NULL));
	}
	json_decref(keys);
	json_decref(all);
	return 0;
}

/* Removes pool containers: of keys (NULL: every pool), all of them or (expired_only) those
 * past their own maximum age or not running. */
static int remove_some(cae_backend *b, json_t *keys, bool expired_only, int *removed,
		       cae_error *err)
{
	*removed = 0;
	if (is_kubernetes(b))
		return cae__k8s_pool_remove(b, keys, expired_only, removed, err);
	if (!is_docker(b))
		return cae_error_set(err, -EOPNOTSUPP, NO_POOL);
	json_t *all = NULL;
	int r = list_pool(b, NULL, &all, err);
	if (r < 0)
		return r;
	int64_t now = (int64_t)time(NULL);
	int64_t fallback = b->cfg->command_executor.pool.max_age_seconds;
	int failed = 0;
	cae_error e = {0};
	size_t i;
	json_t *c;
	json_array_foreach(all, i, c)
	{
		const char *key = label(c, CAE_POOL_LABEL);
		if (keys && (!key || !json_object_get(keys, key)))
			continue;
		int64_t age = now - created_of(c), max_age = max_age_of(c, fallback);
		const char *st = json_string_value(json_object_get(c, "State"));
		const char *why = expired_only ? NULL : "drained";
		if (running(c) && age >= max_age)
			why = "past its maximum age";
		else if (!running(c) &&
			 !(st && strcmp(st, "created") == 0 && age < CREATED_GRACE_S))
			why = "not running";
		if (!why)
			continue;
		int k = take_and_remove(b, c, now, max_age, why, &e);
		if (k > 0)
			(*removed)++;
		else if (k < 0)
			failed++;
	}
	json_decref(all);
	if (failed)
		return cae_error_set(err, -EBUSY, "%d pool container(s) could not be removed: %s",
				     failed, e.message);
	return 0;
}

int cae_backend_pool_drain(cae_backend *b, bool all, int *removed, cae_error *err)
{
	json_t *keys = all || (!is_docker(b) && !is_kubernetes(b)) ? NULL : own_keys(b);
	int r = remove_some(b, keys, false, removed, err);
	json_decref(keys);
	return r;
}

int cae_backend_pool_gc(cae_backend *b, int *removed, cae_error *err)
{
	return remove_some(b, NULL, true, removed, err);
}
