/* The warm pool (command_executor.pool): environments created and started ahead, so that a
 * prepare skips the slowest steps of its backend. This file is the pool's policy, written
 * once for every backend that has a pool; what a backend does its own way (what a member
 * is made from, listing, creating, removing and claiming one) is its cae_pool_ops:
 * src/backend/pool-docker.c (containers) and src/backend/pool-kubernetes.c (pods).
 *
 * A member is named coding-agent-pool-<key>-<random> and labelled with its pool's key (a
 * hash of what a prepare of its environment would create, minus what is the task's), its
 * environment, its creation time and its maximum age; it carries no task, no credential and
 * no token. A prepare whose own key it is claims the oldest that runs and is younger than
 * its own maximum age and the configured one: the backend's claim is atomic (one caller
 * only wins; every other one tries the next member, then prepares cold).
 *
 * A member past its maximum age, or that does not run, is never handed out: claims, fills,
 * `cae pool drain` and `cae gc` remove it, each removal guarded by the backend against a
 * claim made meanwhile (which leaves the member to its task). One being started (by a
 * filler, for less than CREATED_GRACE_S) is neither counted nor removed by a fill.
 *
 * One filler per pool key and state directory at a time (a lock file), so that two fillers
 * do not overfill. The collector (src/backend/backend.c) runs a fill as its pool step.
 *
 * A filler whose backend can (ops->open_stream) opens the new member's helper stream at
 * once and keeps it: a claim of that member by the same process (a long-lived `cae mcp`
 * fills its pool and prepares its sessions' tasks from it) then takes it through that
 * stream instead of opening one (for docker, an exec: ~45 ms of a warm prepare). A kept
 * stream is only ever used by its own process; one whose member left the pool (another
 * process claimed it, or it was removed) is closed at the next list of its pool, so that
 * no process keeps a stream into another's task. */
#include "backend/backend-internal.h"

#include "base/fs.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/banned.h"

#define CREATED_GRACE_S 300 /* created, never started: a filler died (or is slow) */

#define NO_POOL "the warm pool needs the docker or the kubernetes backend"

/* b's pool steps; NULL: b keeps no pool. */
static uint64_t fnv1a(uint64_t h, const char *text)
{
	for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
		h ^= *c;
		h *= 1099511628211ULL;
	}
	return h;
}

int cae__pool_key(const cae_backend *b, json_t *spec, const char *helper,
		  char key[CAE_POOL_KEY_MAX])
{
	_cleanup_free_ char *text = json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS);
	if (!text)
		return -ENOMEM;
	char id[PATH_MAX + 48] = "";
	struct stat st;
	if (helper && stat(helper, &st) == 0)
		snprintf(id, sizeof(id), "%s:%lld:%lld", helper, (long long)st.st_size,
			 (long long)st.st_mtime);
	/* a pool is its instance's: another instance's members are never claimed */
	uint64_t h = fnv1a(fnv1a(fnv1a(14695981039346656037ULL, text), id), b->instance);
	snprintf(key, CAE_POOL_KEY_MAX, "%016llx", (unsigned long long)h);
	return 0;
}

int cae__pool_prepare_init(cae_prepare *p, cae_backend *quiet, cae_backend *b, cae_task *task,
			   const char *environment, cae_error *err)
{
	static const cae_prepare_options none = {.cancel_fd = -1};
	*quiet = *b;
	quiet->log = NULL;
	*task = (cae_task){.uuid = (char *)"pool"};
	*p = (cae_prepare){.b = quiet,
			   .task = task,
			   .opts = &none,
			   .environment = environment,
			   .cancel_fd = -1,
			   .warnings = json_array()};
	return p->warnings ? 0 : cae_error_set(err, -ENOMEM, "out of memory");
}

static const cae_pool_ops *ops_of(const cae_backend *b)
{
	if (strcmp(b->ops->name, "docker") == 0)
		return &cae__docker_pool_ops;
	if (strcmp(b->ops->name, "kubernetes") == 0)
		return &cae__k8s_pool_ops;
	return NULL;
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

int64_t cae__pool_seconds(const char *label)
{
	long long n = label ? strtoll(label, NULL, 10) : 0;
	return n > 0 ? (int64_t)n : 0;
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

/* The members of a pool, oldest first, and the list they were read from. */
struct members {
	json_t *all;
	cae_pool_member *m;
	size_t n;
};

static void members_clear(struct members *ms)
{
	json_decref(ms->all);
	free(ms->m);
	*ms = (struct members){0};
}

/* ---- the streams kept to the members this process started ---- */

struct kept {
	struct kept *next;
	char name[96];
	char key[CAE_POOL_KEY_MAX];
	cae_helper_mux *mux;
};

struct cae_pool_kept {
	struct kept *list;
	size_t n;
};

static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

static void kept_close_list(struct kept *k)
{
	while (k) {
		struct kept *next = k->next;
		cae_helper_mux_close(k->mux);
		free(k);
		k = next;
	}
}

/* Keeps a stream to member name of key's pool, which this process just started. */
static void keep(cae_backend *b, const cae_pool_ops *ops, const char *name, const char *key)
{
	cae_helper_mux *mux = NULL;
	if (!ops->open_stream || ops->open_stream(b, name, &mux) < 0 || !mux)
		return;
	struct kept *k = calloc(1, sizeof(*k));
	pthread_mutex_lock(&kept_lock);
	if (!b->kept)
		b->kept = calloc(1, sizeof(*b->kept));
	if (k && b->kept && b->kept->n < CAE_POOL_KEPT_MAX) {
		snprintf(k->name, sizeof(k->name), "%s", name);
		snprintf(k->key, sizeof(k->key), "%s", key);
		k->mux = mux;
		k->next = b->kept->list;
		b->kept->list = k;
		b->kept->n++;
		k = NULL;
		mux = NULL;
	}
	pthread_mutex_unlock(&kept_lock);
	free(k);
	cae_helper_mux_close(mux);
}

cae_helper_mux *cae__pool_kept_take(cae_backend *b, const char *name)
{
	cae_helper_mux *mux = NULL;
	struct kept *found = NULL;
	pthread_mutex_lock(&kept_lock);
	for (struct kept **at = b->kept ? &b->kept->list : NULL; at && *at; at = &(*at)->next) {
		if (strcmp((*at)->name, name) == 0) {
			found = *at;
			*at = found->next;
			b->kept->n--;
			break;
		}
	}
	pthread_mutex_unlock(&kept_lock);
	if (found) {
		mux = found->mux;
		free(found);
	}
	return mux;
}

/* Closes the kept streams of key's pool (NULL: of every pool) whose member is not among
 * the running members of ms: it left the pool. */
static void kept_prune(cae_backend *b, const char *key, const cae_pool_member *m, size_t n)
{
	struct kept *gone = NULL;
	pthread_mutex_lock(&kept_lock);
	for (struct kept **at = b->kept ? &b->kept->list : NULL; at && *at;) {
		struct kept *k = *at;
		bool here = key && strcmp(k->key, key) != 0; /* another pool's: not listed */
		for (size_t i = 0; !here && i < n; i++)
			here = m[i].state == CAE_POOL_RUNNING && strcmp(m[i].name, k->name) == 0;
		if (here) {
			at = &k->next;
			continue;
		}
		*at = k->next;
		b->kept->n--;
		k->next = gone;
		gone = k;
	}
	pthread_mutex_unlock(&kept_lock);
	kept_close_list(gone);
}

void cae__pool_kept_free(cae_backend *b)
{
	pthread_mutex_lock(&kept_lock);
	struct cae_pool_kept *k = b->kept;
	b->kept = NULL;
	pthread_mutex_unlock(&kept_lock);
	if (k)
		kept_close_list(k->list);
	free(k);
}

/* ---- members ---- */

/* The members of key's pool (NULL: of every pool), in any state, oldest first; a member
 * without a maximum age of its own has the configured one. Kept streams whose member is
 * not among them are closed. */
static int list_members(cae_backend *b, const cae_pool_ops *ops, const char *key,
			struct members *out, cae_error *err)
{
	*out = (struct members){0};
	char sel[64 + CAE_POOL_KEY_MAX];
	snprintf(sel, sizeof(sel), "%s%s%s", CAE_POOL_LABEL, key ? "=" : "", key ? key : "");
	int r = ops->list(b, sel, &out->all, err);
	if (r < 0)
		return r;
	size_t total = json_array_size(out->all);
	out->m = calloc(total ? total : 1, sizeof(*out->m));
	if (!out->m) {
		members_clear(out);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	int64_t fallback = b->cfg->command_executor.pool.max_age_seconds;
	for (size_t i = 0; i < total; i++) {
		cae_pool_member m;
		ops->member(json_array_get(out->all, i), &m);
		/* another instance's members are never claimed, filled or removed; status,
		 * drain and gc of every instance see them with all_instances */
		if (!m.name ||
		    !(key ? cae__backend_own(b, m.instance) : cae__backend_sees(b, m.instance)))
			continue;
		if (m.max_age <= 0)
			m.max_age = fallback;
		size_t at = out->n++;
		while (at > 0 && out->m[at - 1].created > m.created) {
			out->m[at] = out->m[at - 1];
			at--;
		}
		out->m[at] = m;
	}
	kept_prune(b, key, out->m, out->n);
	return 0;
}

/* The members of every pool b's backend sees, and its ops (-EOPNOTSUPP: it keeps no pool). */
static int every_member(cae_backend *b, const cae_pool_ops **ops, struct members *out,
			cae_error *err)
{
	*ops = ops_of(b);
	if (!*ops)
		return cae_error_set(err, -EOPNOTSUPP, NO_POOL);
	return list_members(b, *ops, NULL, out, err);
}

/* Removes m (why: for the log); 1 when removed, 0 when left, < 0 on failure. */
static int remove_member(cae_backend *b, const cae_pool_ops *ops, const cae_pool_member *m,
			 int64_t now, const char *why, cae_error *err)
{
	int64_t age = now - m->created;
	int r = ops->remove(b, m, age, &why, err);
	if (r <= 0)
		return r;
	cae_log_fields(b->log, CAE_LOG_INFO, "pool.removed",
		       json_pack("{s:s, s:s?, s:s, s:I}", ops->noun, m->name, "pool", m->key,
				 "reason", why, "age_s", (json_int_t)age),
		       NULL);
	return 1;
}

int cae__pool_claim(cae_backend *b, const char *key, void *ctx)
{
	const cae_pool_ops *ops = ops_of(b);
	struct members ms;
	cae_error e = {0};
	if (!ops)
		return 0;
	if (list_members(b, ops, key, &ms, &e) < 0) {
		cae_log_event(b->log, CAE_LOG_WARN, "pool.claim_failed", "%s", e.message);
		return 0;
	}
	int64_t now = (int64_t)time(NULL);
	int64_t configured = b->cfg->command_executor.pool.max_age_seconds;
	int found = 0;
	for (size_t i = 0; i < ms.n && !found; i++) {
		const cae_pool_member *m = &ms.m[i];
		if (m->state != CAE_POOL_RUNNING)
			continue;
		/* the younger of its own maximum age and this configuration's */
		int64_t age = now - m->created;
		if (age >= (m->max_age < configured ? m->max_age : configured) || age < 0) {
			/* never handed out: removed, unless another claimer has it */
			if (remove_member(b, ops, m, now, "past its maximum age", &e) < 0)
				cae_log_event(b->log, CAE_LOG_WARN, "pool.remove_failed", "%s",
					      e.message);
			continue;
		}
		json_t *fields = json_pack("{s:s, s:s, s:I}", ops->noun, m->name, "pool", key,
					   "age_s", (json_int_t)age);
		int r = ops->claim(b, m, ctx, fields, &e);
		if (r == 0) {
			cae_log_fields(b->log, CAE_LOG_INFO, "pool.claimed", fields, NULL);
			found = 1;
			continue;
		}
		json_decref(fields);
		if (r == -EBUSY)
			continue; /* another claimer's (or gone) */
		cae_log_event(b->log, CAE_LOG_WARN, "pool.claim_failed", "%s", e.message);
		break;
	}
	members_clear(&ms);
	return found;
}

/* What becomes of a member of age seconds outside a claim. */
enum fate {
	LIVE,	  /* may be handed out */
	STARTING, /* being started by a filler */
	EXPIRED,  /* runs, past its maximum age */
	DEAD,	  /* does not run, and is not being started */
	GONE,	  /* being removed already */
};

static enum fate fate_of(const cae_pool_member *m, int64_t age)
{
	if (m->state == CAE_POOL_DELETING)
		return GONE;
	if (m->state == CAE_POOL_RUNNING)
		return age >= m->max_age ? EXPIRED : LIVE;
	if (m->state == CAE_POOL_STARTING && age < CREATED_GRACE_S)
		return STARTING;
	return DEAD;
}

static const char *const REASON[] = {
    [EXPIRED] = "past its maximum age",
    [DEAD] = "not running",
};

static bool cancelled(int fd)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	return fd >= 0 && poll(&pfd, 1, 0) > 0;
}

/* The fill lock of key (one filler at a time per state directory): an fd holding it, -1
 * when there is no state directory to lock in (filled without one), -EBUSY when another
 * filler holds it. */
static int fill_lock(cae_backend *b, const char *key)
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
static int fill_env(cae_backend *b, const cae_pool_ops *ops, const char *environment, int cancel_fd,
		    int *created, cae_error *err)
{
	const cae_config *cfg = b->cfg;
	json_t *spec = NULL;
	char key[CAE_POOL_KEY_MAX];
	_cleanup_free_ char *helper = NULL;
	int r = ops->spec(b, environment, &spec, key, &helper, err);
	if (r < 0)
		return r;
	int lock = fill_lock(b, key);
	if (lock == -EBUSY) {
		json_decref(spec);
		return 0; /* another process fills this pool now */
	}
	struct members ms;
	r = list_members(b, ops, key, &ms, err);
	int64_t now = (int64_t)time(NULL);
	int live = 0;
	for (size_t i = 0; r == 0 && i < ms.n; i++) {
		enum fate f = fate_of(&ms.m[i], now - ms.m[i].created);
		if (f == LIVE)
			live++;
		if (f != EXPIRED && f != DEAD)
			continue;
		cae_error e = {0};
		if (remove_member(b, ops, &ms.m[i], now, REASON[f], &e) < 0)
			cae_log_event(b->log, CAE_LOG_WARN, "pool.remove_failed", "%s", e.message);
	}
	members_clear(&ms);
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
		int64_t t0 = cae__now_ms();
		r = ops->create(b, spec, key, name, helper, cancel_fd, err);
		if (r < 0) {
			cae_error_prefix(err, "pool");
			break;
		}
		live++;
		(*created)++;
		int64_t t1 = cae__now_ms();
		keep(b, ops, name, key);
		cae_log_fields(b->log, CAE_LOG_INFO, "pool.created",
			       json_pack("{s:s, s:s, s:s, s:I, s:I}", ops->noun, name,
					 "environment", environment, "pool", key, "ms",
					 (json_int_t)(t1 - t0), "stream_ms",
					 (json_int_t)(cae__now_ms() - t1)),
			       NULL);
	}
	json_decref(spec);
	if (lock >= 0)
		close(lock);
	return r;
}

int cae_backend_pool_fill(cae_backend *b, int cancel_fd, int *created, cae_error *err)
{
	*created = 0;
	const cae_pool_ops *ops = ops_of(b);
	if (!ops)
		return cae_error_set(err, -EOPNOTSUPP, NO_POOL);
	int r = 0;
	for (size_t i = 0; i < n_pooled(b->cfg) && r == 0; i++)
		r = fill_env(b, ops, pooled(b->cfg, i), cancel_fd, created, err);
	return r;
}

void cae__pool_maintain(cae_backend *b)
{
	if (!ops_of(b) || n_pooled(b->cfg) == 0)
		return;
	int n = 0;
	cae_error e = {0};
	if (cae_backend_pool_fill(b, -1, &n, &e) < 0)
		cae_log_event(b->log, CAE_LOG_WARN, "pool.fill_failed", "%s", e.message);
}

int64_t cae__pool_period_ms(const cae_backend *b)
{
	if (!ops_of(b) || n_pooled(b->cfg) == 0)
		return 0;
	return (int64_t)b->cfg->command_executor.pool.max_age_seconds * 500;
}

/* The keys of cfg's pools, as a JSON object (key -> environment). */
static json_t *own_keys(cae_backend *b, const cae_pool_ops *ops)
{
	json_t *keys = json_object();
	for (size_t i = 0; i < n_pooled(b->cfg); i++) {
		json_t *spec = NULL;
		char key[CAE_POOL_KEY_MAX];
		char *helper = NULL;
		if (ops->spec(b, pooled(b->cfg, i), &spec, key, &helper, NULL) == 0)
			json_object_set_new(keys, key, json_string(pooled(b->cfg, i)));
		json_decref(spec);
		free(helper);
	}
	return keys;
}

int cae_backend_pool_status(cae_backend *b, json_t **out, cae_error *err)
{
	const cae_pool_ops *ops;
	struct members ms;
	int r = every_member(b, &ops, &ms, err);
	if (r < 0)
		return r;
	json_t *keys = own_keys(b, ops);
	int64_t now = (int64_t)time(NULL);
	*out = json_array();
	for (size_t i = 0; i < ms.n; i++) {
		const cae_pool_member *m = &ms.m[i];
		int64_t age = now - m->created;
		json_array_append_new(
		    *out,
		    json_pack("{s:s, s:s?, s:s?, s:s?, s:s?, s:I, s:I, s:s?, s:b, s:b, s:s?}",
			      "name", m->name, "container_id", m->id, "environment", m->environment,
			      "key", m->key, "created_at", m->created_at[0] ? m->created_at : NULL,
			      "age_s", (json_int_t)age, "max_age_s", (json_int_t)m->max_age,
			      "state", m->state_name[0] ? m->state_name : NULL, "expired",
			      age >= m->max_age, "this_config",
			      m->key && json_object_get(keys, m->key) != NULL, "instance",
			      m->instance));
	}
	json_decref(keys);
	members_clear(&ms);
	return 0;
}

/* Removes pool members: of keys (NULL: every pool), all of them or (expired_only) those
 * past their own maximum age or not running. */
static int remove_some(cae_backend *b, json_t *keys, bool expired_only, int *removed,
		       cae_error *err)
{
	*removed = 0;
	const cae_pool_ops *ops;
	struct members ms;
	int r = every_member(b, &ops, &ms, err);
	if (r < 0)
		return r;
	int64_t now = (int64_t)time(NULL);
	int failed = 0;
	cae_error e = {0};
	for (size_t i = 0; i < ms.n; i++) {
		const cae_pool_member *m = &ms.m[i];
		if (keys && (!m->key || !json_object_get(keys, m->key)))
			continue;
		enum fate f = fate_of(m, now - m->created);
		const char *why = f == EXPIRED || f == DEAD   ? REASON[f]
				  : f == GONE || expired_only ? NULL
							      : "drained";
		if (!why)
			continue;
		int k = remove_member(b, ops, m, now, why, &e);
		if (k > 0)
			(*removed)++;
		else if (k < 0)
			failed++;
	}
	members_clear(&ms);
	if (failed)
		return cae_error_set(err, -EBUSY, "%d pool %s(s) could not be removed: %s", failed,
				     ops->noun, e.message);
	return 0;
}

int cae_backend_pool_drain(cae_backend *b, bool all, int *removed, cae_error *err)
{
	const cae_pool_ops *ops = ops_of(b);
	json_t *keys = all || !ops ? NULL : own_keys(b, ops);
	int r = remove_some(b, keys, false, removed, err);
	json_decref(keys);
	return r;
}

int cae_backend_pool_gc(cae_backend *b, int *removed, cae_error *err)
{
	return remove_some(b, NULL, true, removed, err);
}
