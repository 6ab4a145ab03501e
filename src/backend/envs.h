/* Internal to src/backend: what the backends whose environments are an engine's objects
 * (docker's containers, kubernetes' pods) share about them. The engine is the source of
 * truth: an object's name, labels and annotations say whose environment it is, in which
 * phase (finished; still being prepared; left unfinished by a preparer that is gone), made
 * when, with which warnings. From that one record come its ContainerInfo, the backend's list
 * and its stale gc, written once here.
 *
 * Each backend says, in its cae_envs_ops, how it lists its objects, what one of them
 * records, whether a finished one can still run anything, and how one is removed. */
#ifndef CAE_BACKEND_ENVS_H
#define CAE_BACKEND_ENVS_H

#include "backend/backend-internal.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum cae_env_phase {
	CAE_ENV_NOT_OURS, /* no environment of ours */
	CAE_ENV_FINAL,	  /* its prepare finished */
	CAE_ENV_CREATING, /* its prepare is still running */
	CAE_ENV_FAILED,	  /* its prepare did not finish and never will: its preparer is gone */
} cae_env_phase;

#define CAE_ENV_UUID_MAX 72 /* a valid task uuid and its NUL */

/* What one of a backend's objects records about its environment; the pointers are borrowed
 * from the object. */
typedef struct cae_env_record {
	cae_env_phase phase;
	char uuid[CAE_ENV_UUID_MAX];
	const char *id;		 /* the object's id (ContainerInfo.container_id); NULL: none */
	const char *environment; /* NULL: not recorded */
	const char *created_at;	 /* ISO 8601 as recorded; NULL: not recorded */
	int64_t created;	 /* the same in seconds since the epoch; <= 0: unknown */
	const char *warnings;	 /* a JSON array's text; NULL: none */
	const char *instance;	 /* the cae instance it belongs to; NULL: none recorded */
	/* the status of a finished one: "ready" while it can run commands, else the engine's
	 * word for its state */
	char status[32];
} cae_env_record;

typedef struct cae_envs_ops {
	/* The objects that may be environments of this backend: an array (new), each one then
	 * given to record, which tells the environments among them. */
	int (*list)(cae_backend *b, json_t **objs, cae_error *err);
	/* Fills rec from obj (in the engine's list form or its form of one object);
	 * rec->phase CAE_ENV_NOT_OURS and nothing else when obj is no environment of ours. */
	void (*record)(const cae_backend *b, json_t *obj, cae_env_record *rec);
	/* May be NULL: adds what the backend knows more to entry, obj's entry of the list. */
	void (*extra)(cae_backend *b, json_t *obj, json_t *entry);
	/* A finished environment that can run no command any more (the gc removes it). old:
	 * it goes by its age anyway, so a look that costs may be skipped (false then). */
	bool (*gone)(cae_backend *b, json_t *obj, bool old);
	/* Removes uuid's environment (the gc's removal). A missing one is success. */
	int (*remove)(cae_backend *b, const char *uuid, cae_error *err);
	const char *project; /* where the project is, as commands see it (workspace_path) */
	const char *what;    /* what an environment is: "container", "pod" */
} cae_envs_ops;

/* The phase of an environment whose prepare did not finish: CAE_ENV_CREATING while its
 * preparer (label of cae__preparer_label; NULL: none recorded) may still run it — for
 * the clone's timeout (300 s when none is configured) plus more_s after created (seconds
 * since the epoch) when it cannot be seen from here — else CAE_ENV_FAILED. */
cae_env_phase cae__env_unfinished(const cae_config *cfg, const char *preparer, int64_t created,
				  int more_s);

/* The error of a command in uuid's environment whose prepare did not finish (phase
 * CAE_ENV_CREATING or CAE_ENV_FAILED): -EAGAIN, saying which. */
int cae__env_not_ready(const char *uuid, cae_env_phase phase, cae_error *err);

/* The ContainerInfo of obj; -EINVAL when it is no environment of ours. */
int cae__env_info(const cae_backend *b, const cae_envs_ops *ops, json_t *obj, cae_env_info *info,
		  cae_error *err);

/* The ContainerInfo of p's environment at its ready step: ready, with the prepare's
 * warnings and dependencies; id: the object's id (NULL: none). */
int cae__env_ready_info(const cae_prepare *p, const char *id, cae_env_info *info, cae_error *err);

/* cae_backend_list: the ContainerInfo (as JSON, with ops->extra's fields) of every
 * environment of ours. *out is new. */
int cae__envs_list(cae_backend *b, const cae_envs_ops *ops, json_t **out, cae_error *err);

/* cae_backend_cleanup_stale: removes every environment of ours that is b's to look at (its
 * instance's, cae__backend_sees), that filter (NULL: every one) lets us look at, and that is older
 * than threshold_s, gone (ops->gone) or left unfinished; one still being prepared stays whatever
 * its age (its preparer removes it if it fails). Each removal is counted in *removed and logged
 * (environment.stale_removed, or environment.stale_remove_failed), the whole as
 * environment.cleanup_stale; -EBUSY when any could not be removed. */
int cae__envs_cleanup_stale(cae_backend *b, const cae_envs_ops *ops, int64_t threshold_s,
			    cae_env_filter_fn filter, void *filter_ud, int *removed,
			    cae_error *err);

#endif
