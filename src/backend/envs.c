/* The environments of the backends whose environments are an engine's objects (envs.h):
 * their phase, their ContainerInfo, list and the stale gc, so that the docker and the
 * kubernetes backend differ only in how they read and remove their objects. */
#include "backend/envs.h"

#include "cae/log.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "base/banned.h"

cae_env_phase cae__env_unfinished(const cae_config *cfg, const char *preparer, int64_t created,
				  int more_s)
{
	int timeout = cfg->command_executor.clone.timeout_seconds;
	if (timeout <= 0)
		timeout = 300;
	return cae__preparer_alive(preparer, created, timeout + more_s) ? CAE_ENV_CREATING
									: CAE_ENV_FAILED;
}

int cae__env_not_ready(const char *uuid, cae_env_phase phase, cae_error *err)
{
	return cae_error_set(err, -EAGAIN, "environment %s is not ready: its prepare %s", uuid,
			     phase == CAE_ENV_CREATING ? "is still running"
						       : "did not finish (prepare it again)");
}

/* The ContainerInfo of rec (an environment of ours). */
static int info_of(const cae_backend *b, const cae_envs_ops *ops, const cae_env_record *rec,
		   cae_env_info *info, cae_error *err)
{
	const char *status = rec->phase == CAE_ENV_CREATING ? "creating"
			     : rec->phase == CAE_ENV_FAILED ? "failed"
							    : rec->status;
	json_t *j = json_pack("{s:s?, s:s, s:s?, s:s, s:s?, s:s, s:s, s:s?}", "container_id",
			      rec->id, "task_uuid", rec->uuid, "environment_name", rec->environment,
			      "workspace_path", ops->project, "created_at", rec->created_at,
			      "status", status, "backend", b->ops->name, "instance", rec->instance);
	json_t *w = json_loads(rec->warnings ? rec->warnings : "[]", 0, NULL);
	json_object_set_new(j, "warnings", json_is_array(w) ? w : json_array());
	if (!json_is_array(w))
		json_decref(w);
	int r = cae_env_info_from_json(j, info, err);
	json_decref(j);
	return r;
}

int cae__env_info(const cae_backend *b, const cae_envs_ops *ops, json_t *obj, cae_env_info *info,
		  cae_error *err)
{
	memset(info, 0, sizeof(*info));
	cae_env_record rec;
	ops->record(b, obj, &rec);
	if (rec.phase == CAE_ENV_NOT_OURS)
		return cae_error_set(err, -EINVAL, "not a cae environment's %s", ops->what);
	return info_of(b, ops, &rec, info, err);
}

int cae__env_ready_info(const cae_prepare *p, const char *id, cae_env_info *info, cae_error *err)
{
	json_t *j =
	    json_pack("{s:s?, s:s, s:s, s:s, s:s, s:s, s:s, s:O, s:O, s:O?, s:s}", "container_id",
		      id, "task_uuid", p->task->uuid, "environment_name", p->environment,
		      "workspace_path", p->project, "created_at", p->created_at, "status", "ready",
		      "backend", p->b->ops->name, "warnings", p->warnings, "deps", p->deps,
		      "limits", p->limits, "instance", p->b->instance);
	int r = cae_env_info_from_json(j, info, err);
	json_decref(j);
	return r;
}

int cae__envs_list(cae_backend *b, const cae_envs_ops *ops, json_t **out, cae_error *err)
{
	json_t *objs = NULL;
	int r = ops->list(b, &objs, err);
	if (r < 0)
		return r;
	*out = json_array();
	size_t i;
	json_t *obj;
	json_array_foreach(objs, i, obj)
	{
		cae_env_record rec;
		cae_env_info info;
		ops->record(b, obj, &rec);
		if (rec.phase == CAE_ENV_NOT_OURS || info_of(b, ops, &rec, &info, NULL) < 0)
			continue;
		json_t *j = cae_env_info_to_json(&info);
		if (ops->extra)
			ops->extra(b, obj, j);
		json_array_append_new(*out, j);
		cae_env_info_clear(&info);
	}
	json_decref(objs);
	return 0;
}

int cae__envs_cleanup_stale(cae_backend *b, const cae_envs_ops *ops, int64_t threshold_s,
			    cae_env_filter_fn filter, void *filter_ud, int *removed, cae_error *err)
{
	json_t *objs = NULL;
	int r = ops->list(b, &objs, err);
	if (r < 0)
		return r;
	int64_t now = (int64_t)time(NULL);
	int failed = 0;
	size_t i;
	json_t *obj;
	json_array_foreach(objs, i, obj)
	{
		cae_env_record rec;
		ops->record(b, obj, &rec);
		/* An unfinished environment whose preparer is gone goes whatever its age; one
		 * still being prepared stays (its preparer removes it if it fails). */
		if (rec.phase == CAE_ENV_NOT_OURS || rec.phase == CAE_ENV_CREATING ||
		    !cae__backend_sees(b, rec.instance) || (filter && !filter(rec.uuid, filter_ud)))
			continue;
		bool old = rec.created > 0 && now - rec.created >= threshold_s;
		bool gone = rec.phase == CAE_ENV_FINAL && ops->gone(b, obj, old);
		if (rec.phase != CAE_ENV_FAILED && !old && !gone)
			continue;
		cae_error e = {0};
		if (ops->remove(b, rec.uuid, &e) == 0) {
			(*removed)++;
			cae_log_fields(b->log, CAE_LOG_INFO, "environment.stale_removed",
				       json_pack("{s:s, s:I, s:b, s:b}", "task_uuid", rec.uuid,
						 "age_s", (json_int_t)(now - rec.created),
						 "unfinished", rec.phase == CAE_ENV_FAILED, "gone",
						 gone),
				       NULL);
		} else {
			failed++;
			cae_log_fields(b->log, CAE_LOG_WARN, "environment.stale_remove_failed",
				       json_pack("{s:s}", "task_uuid", rec.uuid), "%s", e.message);
		}
	}
	json_decref(objs);
	cae_log_fields(b->log, CAE_LOG_INFO, "environment.cleanup_stale",
		       json_pack("{s:i, s:i, s:I, s:s}", "removed", *removed, "failed", failed,
				 "threshold_s", (json_int_t)threshold_s, "backend", b->ops->name),
		       NULL);
	if (failed)
		return cae_error_set(err, -EBUSY, "%d stale environment(s) could not be removed",
				     failed);
	return 0;
}
