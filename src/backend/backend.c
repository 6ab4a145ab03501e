/* The environment API's entry points (include/cae/backend.h) over a backend's hooks, what is
 * the same for every backend around them (cleanup's events, the environments a backend
 * object prepared, the collector thread, which also keeps the docker backend's warm pool
 * filled). */
#include "backend/backend-internal.h"

#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

static int backend_new(const char *name, const cae_config *cfg, struct cae_log *log,
		       cae_backend **out, cae_error *err)
{
	if (strcmp(name, "local") == 0)
		return cae__local_backend_new(cfg, log, out, err);
	if (strcmp(name, "docker") == 0)
		return cae__docker_backend_new(cfg, log, out, err);
	if (strcmp(name, "kubernetes") == 0)
		return cae__kubernetes_backend_new(cfg, log, out, err);
	/* auto: kubernetes only when configured, then docker when an engine answers, else local */
	if (strcmp(name, "auto") == 0 && cae__kubernetes_backend_configured(cfg))
		return cae__kubernetes_backend_new(cfg, log, out, err);
	if (strcmp(name, "auto") == 0)
		return cae__docker_backend_available(cfg)
			   ? cae__docker_backend_new(cfg, log, out, err)
			   : cae__local_backend_new(cfg, log, out, err);
	return cae_error_set(err, -EINVAL,
			     "unknown backend \"%s\" (auto, docker, local or kubernetes)", name);
}

const char *cae_backend_resolve_name(const cae_config *cfg)
{
	const char *name = cae_config_backend_name(cfg->command_executor.backend);
	if (strcmp(name, "auto") != 0)
		return name;
	if (cae__kubernetes_backend_configured(cfg))
		return "kubernetes";
	return cae__docker_backend_available(cfg) ? "docker" : "local";
}

int cae_backend_new_named(const char *name, const cae_config *cfg, struct cae_log *log,
			  cae_backend **out, cae_error *err)
{
	int r = backend_new(name, cfg, log, out, err);
	if (r == 0)
		cae_config_instance(cfg, (*out)->instance);
	return r;
}

void cae_backend_set_all_instances(cae_backend *b, bool all)
{
	b->all_instances = all;
}

const char *cae_backend_instance(const cae_backend *b)
{
	return b->instance;
}

bool cae__backend_own(const cae_backend *b, const char *instance)
{
	return instance && strcmp(instance, b->instance) == 0;
}

bool cae__backend_sees(const cae_backend *b, const char *instance)
{
	return b->all_instances || cae__backend_own(b, instance);
}

int cae__backend_foreign(const cae_backend *b, const char *uuid, cae_error *err)
{
	(void)b;
	return cae_error_set(err, -EPERM,
			     "environment %s belongs to another cae instance "
			     "(command_executor.instance); it is left alone",
			     uuid);
}

int cae_backend_new(const cae_config *cfg, struct cae_log *log, cae_backend **out, cae_error *err)
{
	return cae_backend_new_named(cae_config_backend_name(cfg->command_executor.backend), cfg,
				     log, out, err);
}

/* Guards every backend's list of prepared environments (short critical sections). */
static pthread_mutex_t prepared_lock = PTHREAD_MUTEX_INITIALIZER;

static void prepared_free(struct cae_prepared_env *e)
{
	if (e) {
		free(e->uuid);
		free(e->container_id);
		free(e->created_at);
		free(e);
	}
}

/* Takes uuid's entry out of b's list; NULL when there is none. */
static struct cae_prepared_env *prepared_take(cae_backend *b, const char *uuid)
{
	pthread_mutex_lock(&prepared_lock);
	struct cae_prepared_env **pp = &b->prepared, *found = NULL;
	for (; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->uuid, uuid) == 0) {
			found = *pp;
			*pp = found->next;
			break;
		}
	pthread_mutex_unlock(&prepared_lock);
	return found;
}

void cae__backend_remember(cae_backend *b, const cae_env_info *info)
{
	if (!info->task_uuid)
		return;
	prepared_free(prepared_take(b, info->task_uuid));
	struct cae_prepared_env *e = calloc(1, sizeof(*e));
	if (!e)
		return;
	e->uuid = strdup(info->task_uuid);
	e->container_id = info->container_id ? strdup(info->container_id) : NULL;
	e->created_at = info->created_at ? strdup(info->created_at) : NULL;
	if (!e->uuid) {
		prepared_free(e);
		return;
	}
	pthread_mutex_lock(&prepared_lock);
	e->next = b->prepared;
	b->prepared = e;
	pthread_mutex_unlock(&prepared_lock);
}

static bool same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

int cae_backend_cleanup_prepared(cae_backend *b, int *removed, cae_error *err)
{
	*removed = 0;
	pthread_mutex_lock(&prepared_lock);
	struct cae_prepared_env *list = b->prepared;
	b->prepared = NULL;
	pthread_mutex_unlock(&prepared_lock);
	int failed = 0;
	cae_error e;
	cae_error_clear(&e);
	while (list) {
		struct cae_prepared_env *p = list;
		list = p->next;
		cae_env_info info;
		/* prepared again since (by anyone): no longer ours to remove */
		if (cae_backend_info(b, p->uuid, &info, NULL) == 0) {
			bool ours = same_str(info.container_id, p->container_id) &&
				    same_str(info.created_at, p->created_at);
			cae_env_info_clear(&info);
			if (ours) {
				if (cae_backend_cleanup(b, p->uuid, &e) == 0)
					(*removed)++;
				else
					failed++;
			}
		}
		prepared_free(p);
	}
	if (failed)
		return cae_error_set(err, -EBUSY, "%d environment(s) could not be removed: %s",
				     failed, e.message);
	return 0;
}

void cae_backend_free(cae_backend *b)
{
	if (!b)
		return;
	while (b->prepared) {
		struct cae_prepared_env *p = b->prepared;
		b->prepared = p->next;
		prepared_free(p);
	}
	cae__pool_kept_free(b);
	b->ops->free(b);
}

const char *cae_backend_name(const cae_backend *b)
{
	return b->ops->name;
}

int cae_backend_prepare(cae_backend *b, const cae_task *task, const char *environment_name,
			const cae_prepare_options *opts, cae_env_info *info, cae_error *err)
{
	static const cae_prepare_options none = {.cancel_fd = -1};
	memset(info, 0, sizeof(*info));
	return cae__prepare_run(b, task, environment_name, opts ? opts : &none, info, err);
}

cae_run_spec cae__backend_run_spec(const cae_exec_request *req, const char *cwd,
				   const char *const *envp)
{
	return (cae_run_spec){
	    .argv = req->argv,
	    .envp = envp,
	    .cwd = cwd,
	    .stdin_data = req->stdin_data,
	    .stdin_len = req->stdin_len,
	    .has_stdin = req->has_stdin,
	    .timeout_ms = req->timeout_ms,
	    .max_stdout = req->max_stdout,
	    .max_stderr = req->max_stderr,
	    .truncate = req->truncate,
	    .cancel_fd = req->cancel_fd,
	    .live = req->live,
	};
}

int cae_backend_exec(cae_backend *b, const char *task_uuid, const cae_exec_request *req,
		     cae_run_result *res, cae_error *err)
{
	memset(res, 0, sizeof(*res));
	if (!req->argv || !req->argv[0])
		return cae_error_set(err, -EINVAL, "no command to run");
	/* Python's output as it is written, not when a pipe's buffer fills or the program
	 * ends (live output, process sessions), on every backend; the caller's value wins. */
	size_t n = 0;
	bool has = false;
	for (const char *const *e = req->extra_env; e && *e; e++, n++)
		has = has || strncmp(*e, "PYTHONUNBUFFERED=", 17) == 0;
	if (has)
		return b->ops->exec(b, task_uuid, req, res, err);
	_cleanup_free_ const char **env = calloc(n + 2, sizeof(char *));
	if (!env)
		return cae_error_set(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		env[i] = req->extra_env[i];
	env[n] = "PYTHONUNBUFFERED=1";
	cae_exec_request q = *req;
	q.extra_env = env;
	return b->ops->exec(b, task_uuid, &q, res, err);
}

json_t *cae_backend_network_denied(cae_backend *b, const char *task_uuid)
{
	return b && b->ops->network_denied && task_uuid ? b->ops->network_denied(b, task_uuid)
							: NULL;
}

int cae_backend_port_forward(cae_backend *b, const char *task_uuid, int port, int *host_port,
			     cae_error *err)
{
	*host_port = 0;
	if (!cae_task_uuid_valid(task_uuid))
		return cae_error_set(err, -EINVAL, "invalid task uuid");
	if (port < 1 || port > 65535)
		return cae_error_set(err, -EINVAL, "port must be 1-65535, not %d", port);
	if (!b->ops->port_forward)
		return cae_error_set(err, -EOPNOTSUPP, "the %s backend has no port forwards",
				     b->ops->name);
	return b->ops->port_forward(b, task_uuid, port, host_port, err);
}

int cae_backend_edit(cae_backend *b, const char *task_uuid, const cae_editor_limits *limits,
		     const cae_editor_request *req, cae_editor_result *res, cae_error *err)
{
	memset(res, 0, sizeof(*res));
	if (!cae_task_uuid_valid(task_uuid))
		return cae_error_set(err, -EINVAL, "invalid task uuid");
	if (!b->ops->edit)
		return cae_error_set(err, -EOPNOTSUPP,
				     "the %s backend edits its environments on this host",
				     b->ops->name);
	return b->ops->edit(b, task_uuid, limits, req, res, err);
}

int cae_backend_guard(cae_backend *b, const char *task_uuid, cae_error *err)
{
	if (!b || !b->ops->guard || !task_uuid || !cae_task_uuid_valid(task_uuid))
		return 0;
	return b->ops->guard(b, task_uuid, err);
}

int cae_backend_fs(cae_backend *b, const char *task_uuid, const cae_fs_request *q,
		   cae_fs_reply *rep, cae_error *err)
{
	memset(rep, 0, sizeof(*rep));
	if (!cae_task_uuid_valid(task_uuid))
		return cae_error_set(err, -EINVAL, "invalid task uuid");
	if (!b->ops->fs)
		return cae_error_set(err, -EOPNOTSUPP, "the %s backend has no helper for files",
				     b->ops->name);
	return b->ops->fs(b, task_uuid, q, rep, err);
}

int cae_backend_cleanup(cae_backend *b, const char *task_uuid, cae_error *err)
{
	if (!cae_task_uuid_valid(task_uuid))
		return cae_error_set(err, -EINVAL, "invalid task uuid");
	/* another instance's environment is never removed by this one */
	cae_env_info info;
	int r = b->ops->info(b, task_uuid, &info, NULL);
	bool foreign = r == 0 && !cae__backend_own(b, info.instance);
	if (r == 0)
		cae_env_info_clear(&info);
	if (foreign)
		r = cae__backend_foreign(b, task_uuid, err);
	else
		r = b->ops->remove(b, task_uuid, true, err);
	if (r == 0)
		prepared_free(prepared_take(b, task_uuid));
	if (r == 0)
		cae_log_fields(
		    b->log, CAE_LOG_INFO, "environment.cleanup",
		    json_pack("{s:s, s:s}", "task_uuid", task_uuid, "backend", b->ops->name), NULL);
	else
		cae_log_fields(
		    b->log, CAE_LOG_ERROR, "environment.cleanup_failed",
		    json_pack("{s:s, s:s}", "task_uuid", task_uuid, "backend", b->ops->name), "%s",
		    err ? err->message : "");
	return r;
}

int cae_backend_cleanup_stale(cae_backend *b, int64_t threshold_s, int *removed, cae_error *err)
{
	return cae_backend_cleanup_stale_filtered(b, threshold_s, NULL, NULL, removed, err);
}

int cae_backend_cleanup_stale_filtered(cae_backend *b, int64_t threshold_s,
				       cae_env_filter_fn filter, void *userdata, int *removed,
				       cae_error *err)
{
	*removed = 0;
	return b->ops->cleanup_stale(b, threshold_s, filter, userdata, removed, err);
}

/* ---- the collector ---- */

struct cae_backend_collector {
	cae_backend *b;
	cae_collector_options o;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cv; /* signalled on stop, after each run, and for a pool step */
	bool stop;
	bool pool_wanted; /* a pool container was claimed: fill again before the next run */
	unsigned runs;
};

/* Guards b->collector against a collector starting or stopping during a wake. */
static pthread_mutex_t collector_lock = PTHREAD_MUTEX_INITIALIZER;

void cae__backend_pool_wake(cae_backend *b)
{
	pthread_mutex_lock(&collector_lock);
	cae_backend_collector *c = b->collector;
	if (c) {
		pthread_mutex_lock(&c->lock);
		c->pool_wanted = true;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->lock);
	}
	pthread_mutex_unlock(&collector_lock);
}

static void deadline_after(struct timespec *ts, int64_t ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)(ms / 1000);
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* Each run collects, then fills the warm pool (nothing without one); between runs, a claim
 * (cae__backend_pool_wake) brings a pool step alone, the next run keeping its time. */
static void *collector_main(void *arg)
{
	cae_backend_collector *c = arg;
	bool collect = true;
	struct timespec until;
	for (;;) {
		if (collect) {
			int removed = 0;
			cae_error err;
			cae_error_clear(&err);
			if (cae_backend_cleanup_stale_filtered(c->b, c->o.threshold_s, c->o.filter,
							       c->o.filter_userdata, &removed,
							       &err) < 0)
				cae_log_event(c->b->log, CAE_LOG_WARN, "environment.collect_failed",
					      "%s", err.message);
		}
		cae__pool_maintain(c->b);
		pthread_mutex_lock(&c->lock);
		if (collect) {
			c->runs++;
			pthread_cond_broadcast(&c->cv);
			if (c->o.interval_ms > 0)
				deadline_after(&until, c->o.interval_ms);
		}
		collect = false;
		if (c->o.interval_ms > 0 && !c->stop) {
			/* a pool also gets a step every half of its maximum age, so that what
			 * expires is replaced without a claim */
			int64_t period = cae__pool_period_ms(c->b);
			struct timespec pool_until = until;
			if (period > 0)
				deadline_after(&pool_until, period);
			bool pool_first = period > 0 && (pool_until.tv_sec < until.tv_sec ||
							 (pool_until.tv_sec == until.tv_sec &&
							  pool_until.tv_nsec < until.tv_nsec));
			int w = 0;
			while (!c->stop && !c->pool_wanted && w != ETIMEDOUT)
				w = pthread_cond_timedwait(&c->cv, &c->lock,
							   pool_first ? &pool_until : &until);
			collect = w == ETIMEDOUT && !pool_first;
		}
		c->pool_wanted = false;
		bool done = c->stop || c->o.interval_ms <= 0;
		pthread_mutex_unlock(&c->lock);
		if (done)
			return NULL;
	}
}

int cae_backend_collector_start(cae_backend *b, const cae_collector_options *o,
				cae_backend_collector **out, cae_error *err)
{
	cae_backend_collector *c = calloc(1, sizeof(*c));
	if (!c)
		return cae_error_set(err, -ENOMEM, "out of memory");
	c->b = b;
	c->o = *o;
	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cv, &ca);
	pthread_condattr_destroy(&ca);
	int r = pthread_create(&c->thread, NULL, collector_main, c);
	if (r != 0) {
		pthread_cond_destroy(&c->cv);
		pthread_mutex_destroy(&c->lock);
		free(c);
		return cae_error_set(err, -r, "cannot start the collector: %s", strerror(r));
	}
	pthread_mutex_lock(&collector_lock);
	if (!b->collector)
		b->collector = c;
	pthread_mutex_unlock(&collector_lock);
	*out = c;
	return 0;
}

unsigned cae_backend_collector_wait(cae_backend_collector *c, unsigned runs, int64_t timeout_ms)
{
	struct timespec until;
	deadline_after(&until, timeout_ms);
	pthread_mutex_lock(&c->lock);
	while (c->runs < runs && pthread_cond_timedwait(&c->cv, &c->lock, &until) != ETIMEDOUT)
		;
	unsigned n = c->runs;
	pthread_mutex_unlock(&c->lock);
	return n;
}

void cae_backend_collector_stop(cae_backend_collector *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&collector_lock);
	if (c->b->collector == c)
		c->b->collector = NULL;
	pthread_mutex_unlock(&collector_lock);
	pthread_mutex_lock(&c->lock);
	c->stop = true;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->thread, NULL);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

int cae_backend_list(cae_backend *b, json_t **out, cae_error *err)
{
	int r = b->ops->list(b, out, err);
	if (r < 0)
		return r;
	/* this instance's environments only (every one with all_instances) */
	for (size_t i = json_array_size(*out); i-- > 0;) {
		json_t *e = json_array_get(*out, i);
		if (!cae__backend_sees(b, json_string_value(json_object_get(e, "instance"))))
			json_array_remove(*out, i);
	}
	return 0;
}

int cae_backend_info(cae_backend *b, const char *task_uuid, cae_env_info *info, cae_error *err)
{
	memset(info, 0, sizeof(*info));
	if (!cae_task_uuid_valid(task_uuid))
		return cae_error_set(err, -EINVAL, "invalid task uuid");
	int r = b->ops->info(b, task_uuid, info, err);
	if (r == 0 && !cae__backend_sees(b, info->instance)) {
		/* another instance's: not there, to this one (the same words as a missing one) */
		cae_env_info_clear(info);
		return cae_error_set(err, -ENOENT, "no environment for task %s", task_uuid);
	}
	return r;
}

const char *cae_backend_select_environment(const cae_config *cfg, const char *name, char **warning)
{
	*warning = NULL;
	const char *def = cfg->command_executor.default_environment;
	if (name && *name && cae_config_environment_image(cfg, name))
		return name;
	const char *used = def && cae_config_environment_image(cfg, def) ? def : "python";
	char buf[512];
	if (!name || !*name)
		snprintf(buf, sizeof(buf),
			 "no environment selected; using the default environment \"%s\"", used);
	else
		snprintf(buf, sizeof(buf),
			 "unknown environment \"%.200s\"; using the default environment \"%s\"",
			 name, used);
	*warning = strdup(buf);
	return used;
}
