/* cae env list | prepare | cleanup | gc (which know the warm pool, docker or kubernetes) */
#include "cli/cli.h"

#include "base/macro.h"
#include "base/scratch.h"
#include "base/txn.h"
#include "cae/worker.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/banned.h"

int cae_cli_task_option(task_opts *t, int opt, const char *arg)
{
	switch (opt) {
	case OPT_TASK:
		t->task_file = arg;
		return 1;
	case OPT_REPO:
		t->repo = arg;
		return 1;
	case OPT_UUID:
		t->uuid = arg;
		return 1;
	case OPT_KIND:
		t->kind = arg;
		return 1;
	case OPT_BRANCH:
		t->branch = arg;
		return 1;
	case OPT_TARGET:
		t->target = arg;
		return 1;
	case OPT_PLATFORM:
		t->platform = arg;
		return 1;
	case OPT_ENV:
		t->env = arg;
		return 1;
	case OPT_WORKSPACE:
		t->workspace = arg;
		return 1;
	case OPT_FORCE:
		t->force = true;
		return 1;
	}
	return 0;
}

static char *random_uuid(const char *prefix)
{
	unsigned char b[8];
	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
		return NULL;
	char *s = malloc(40);
	if (s)
		snprintf(s, 40, "%s%02x%02x%02x%02x%02x%02x%02x%02x", prefix, b[0], b[1], b[2],
			 b[3], b[4], b[5], b[6], b[7]);
	return s;
}

int cae_cli_build_task(const task_opts *t, bool gen_uuid, cae_task *task, char **generated)
{
	cae_error err;
	cae_error_clear(&err);
	*generated = NULL;
	json_t *j;
	if (t->task_file) {
		j = cae_cli_read_json(t->task_file, &err);
		if (!j) {
			fprintf(stderr, "cae: %s\n", err.message);
			return -EINVAL;
		}
	} else {
		j = json_object();
	}
	const char *uuid = t->uuid;
	if (!uuid && !json_object_get(j, "uuid") && gen_uuid) {
		*generated = random_uuid(t->workspace ? "ws-" : "run-");
		uuid = *generated;
	}
	if (uuid)
		json_object_set_new(j, "uuid", json_string(uuid));
	if (t->repo)
		json_object_set_new(j, "repo", json_string(t->repo));
	else if (t->workspace && !json_object_get(j, "repo"))
		json_object_set_new(j, "repo", json_string(t->workspace));
	if (t->kind)
		json_object_set_new(j, "kind", json_string(t->kind));
	if (t->branch)
		json_object_set_new(j, "branch", json_string(t->branch));
	if (t->target)
		json_object_set_new(j, "target_branch", json_string(t->target));
	if (t->platform)
		json_object_set_new(j, "platform", json_string(t->platform));
	int r = cae_task_from_json(j, task, &err);
	json_decref(j);
	if (r < 0)
		fprintf(stderr, "cae: %s\n", err.message);
	return r;
}

struct progress_tty {
	bool tty;
};

static void progress_print(void *ud, double step, double total, const char *msg)
{
	struct progress_tty *p = ud;
	if (p->tty)
		fprintf(stderr, "\r\033[K[%g/%g] %s%s", step, total, msg,
			step >= total ? "\n" : "");
}

int cae_cli_do_prepare(cae_session *s, const task_opts *t, const cae_task *task, json_t **info)
{
	cae_error err;
	cae_error_clear(&err);
	int r;
	if (t->workspace) {
		cae_backend *b = NULL;
		r = cae_backend_new_named("local", cae_session_config(s), cae_cli_log(), &b, &err);
		if (r == 0) {
			cae_prepare_options o = {
			    .workspace = t->workspace, .cancel_fd = -1, .force = t->force};
			cae_env_info ei;
			r = cae_backend_prepare(b, task, t->env, &o, &ei, &err);
			if (r == 0) {
				*info = cae_env_info_to_json(&ei);
				cae_env_info_clear(&ei);
			}
			cae_backend_free(b);
		}
	} else {
		struct progress_tty p = {isatty(STDERR_FILENO)};
		cae_call_ctx ctx = {
		    .cancel_fd = -1, .progress = progress_print, .progress_userdata = &p};
		r = cae_session_prepare_ex(s, task, t->env, t->force, &ctx, info, &err);
	}
	if (r < 0)
		cae_cli_error("prepare", &err);
	return r;
}

static int usage_env(FILE *f)
{
	fprintf(f, "usage: cae env list [--pool] [--all-instances] [options]\n\nLists this cae "
		   "instance's environments (JSON array of "
		   "ContainerInfo); a running one has `resources`: CPU time, memory and processes "
		   "in use next to its limits.\n\noptions:\n"
		   "  --pool             also the warm pool's containers or pods (status \"pool\", "
		   "no task; as `cae pool status`)\n" ALL_INSTANCES_HELP CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

/* The warm pool's containers (docker) or pods (kubernetes) as entries of `env list --pool`. */
static void append_pool(cae_backend *b, json_t *list)
{
	json_t *pool = NULL;
	if (cae_backend_pool_status(b, &pool, NULL) < 0)
		return;
	size_t i;
	json_t *p;
	json_array_foreach(pool, i, p)
	{
		json_array_append_new(
		    list, json_pack("{s:O?, s:O?, s:O?, s:s, s:s, s:O}", "container_id",
				    json_object_get(p, "container_id"), "environment_name",
				    json_object_get(p, "environment"), "created_at",
				    json_object_get(p, "created_at"), "status", "pool", "backend",
				    cae_backend_name(b), "pool", p));
	}
	json_decref(pool);
}

enum { OPT_POOL = OPT_LAST_SHARED };

int cae_cli_env(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"pool", no_argument, NULL, OPT_POOL},
	    {"all-instances", no_argument, NULL, OPT_ALL_INSTANCES},
	    CAE_CLI_COMMON_LONGOPTS,
	    {0, 0, 0, 0}};
	cae_cli_common c = {0};
	bool with_pool = false, all_instances = false;
	int opt;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return usage_env(stdout);
		if (opt == OPT_POOL)
			with_pool = true;
		else if (opt == OPT_ALL_INSTANCES)
			all_instances = true;
		else if (!cae_cli_common_option(&c, opt, optarg))
			return usage_env(stderr);
	}
	if (optind >= argc || strcmp(argv[optind], "list") != 0)
		return usage_env(stderr);
	cae_session *s;
	if (cae_cli_open(&c, &s) < 0)
		return 1;
	json_t *list = NULL;
	cae_error err;
	cae_backend_set_all_instances(cae_session_backend(s), all_instances);
	int r = cae_backend_list(cae_session_backend(s), &list, &err);
	if (r == 0 && with_pool)
		append_pool(cae_session_backend(s), list);
	if (r == 0)
		cae_cli_print_json(list);
	else
		fprintf(stderr, "cae: %s\n", err.message);
	json_decref(list);
	cae_session_free(s);
	return r == 0 ? 0 : 1;
}

static int usage_prepare(FILE *f)
{
	fprintf(f,
		"usage: cae prepare (--task FILE | --repo URL|PATH --uuid UUID | --workspace DIR) "
		"[options]\n\nPrepares an environment for a task (clone, dependencies) and prints "
		"its ContainerInfo. An existing environment of the task is replaced only when "
		"nothing is lost (no file changed since its last commit, no other live process "
		"preparing it); another cae instance's is never replaced.\n\noptions:\n" TASK_HELP
		"  --force            replace an existing environment of the task even when that "
		"loses its uncommitted changes\n" CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

int cae_cli_prepare(int argc, char **argv)
{
	static const struct option longopts[] = {TASK_LONGOPTS,
						 {"force", no_argument, NULL, OPT_FORCE},
						 CAE_CLI_COMMON_LONGOPTS,
						 {0, 0, 0, 0}};
	cae_cli_common c = {0};
	task_opts t = {0};
	int opt;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return usage_prepare(stdout);
		if (!cae_cli_common_option(&c, opt, optarg) &&
		    !cae_cli_task_option(&t, opt, optarg))
			return usage_prepare(stderr);
	}
	if (optind < argc)
		return usage_prepare(stderr);
	cae_task task;
	_cleanup_free_ char *gen = NULL;
	if (cae_cli_build_task(&t, t.workspace != NULL, &task, &gen) < 0)
		return 2;
	cae_session *s;
	if (cae_cli_open(&c, &s) < 0) {
		cae_task_clear(&task);
		return 1;
	}
	json_t *info = NULL;
	int r = cae_cli_do_prepare(s, &t, &task, &info);
	if (r == 0)
		cae_cli_print_json(info);
	json_decref(info);
	cae_task_clear(&task);
	cae_session_free(s);
	return r == 0 ? 0 : 1;
}

static int usage_cleanup(FILE *f)
{
	fprintf(f, "usage: cae cleanup [--uuid] UUID [options]\n\nRemoves a task's environment "
		   "(never another cae instance's).\n\noptions:\n" CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

int cae_cli_cleanup(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"uuid", required_argument, NULL, OPT_UUID}, CAE_CLI_COMMON_LONGOPTS, {0, 0, 0, 0}};
	cae_cli_common c = {0};
	const char *uuid = NULL;
	int opt;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return usage_cleanup(stdout);
		if (opt == OPT_UUID)
			uuid = optarg;
		else if (!cae_cli_common_option(&c, opt, optarg))
			return usage_cleanup(stderr);
	}
	if (!uuid && optind < argc)
		uuid = argv[optind++];
	if (!uuid || optind < argc)
		return usage_cleanup(stderr);
	cae_session *s;
	if (cae_cli_open(&c, &s) < 0)
		return 1;
	cae_error err;
	cae_error_clear(&err);
	cae_env_info old;
	bool existed = cae_backend_info(cae_session_backend(s), uuid, &old, NULL) == 0;
	if (existed)
		cae_env_info_clear(&old);
	int r = cae_backend_cleanup(cae_session_backend(s), uuid, &err);
	if (r == 0) {
		/* a task already removed is no error, and says it removed nothing */
		json_t *j = json_pack("{s:s, s:b}", "task_uuid", uuid, "removed", existed);
		cae_cli_print_json(j);
		json_decref(j);
	} else {
		cae_cli_error("cleanup", &err);
	}
	cae_session_free(s);
	return r == 0 ? 0 : 1;
}

static int usage_gc(FILE *f)
{
	fprintf(f,
		"usage: cae gc [--older-than-hours H] [--all-instances] [options]\n\nRemoves every "
		"environment of this cae instance older "
		"than the threshold (default: command_executor.cleanup.stale_threshold_hours), "
		"whose prepare died, or that can run nothing any more (its container stopped for "
		"good, its workspace gone), and prints how many. Then completes or rolls back the "
		"file changes a killed cae "
		"process left in the remaining environments, and removes the rollback "
		"snapshots, clone bundles and uploads to containers (cae-snap.*, cae-bundle-*, "
		"cae-upload-* in $TMPDIR and /tmp) of "
		"processes that are gone (those of older versions, which do not name their "
		"process, once older than the threshold and at least an hour). With the docker "
		"backend it "
		"also removes the warm pool's containers past their own maximum age or no longer "
		"running, of any configuration of this instance (pool_removed, when there were "
		"any).\n\noptions:\n  "
		"--older-than-hours H  threshold in hours (0 = "
		"all)\n" ALL_INSTANCES_HELP CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

int cae_cli_gc(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"older-than-hours", required_argument, NULL, OPT_HOURS},
	    {"all-instances", no_argument, NULL, OPT_ALL_INSTANCES},
	    CAE_CLI_COMMON_LONGOPTS,
	    {0, 0, 0, 0}};
	cae_cli_common c = {0};
	double hours = -1;
	bool all_instances = false;
	int opt;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return usage_gc(stdout);
		if (opt == OPT_HOURS) {
			char *end;
			hours = strtod(optarg, &end);
			if (*end || hours < 0)
				return usage_gc(stderr);
		} else if (opt == OPT_ALL_INSTANCES) {
			all_instances = true;
		} else if (!cae_cli_common_option(&c, opt, optarg)) {
			return usage_gc(stderr);
		}
	}
	if (optind < argc)
		return usage_gc(stderr);
	cae_session *s;
	if (cae_cli_open(&c, &s) < 0)
		return 1;
	if (hours < 0)
		hours = cae_session_config(s)->command_executor.cleanup.stale_threshold_hours;
	cae_backend_set_all_instances(cae_session_backend(s), all_instances);
	int removed = 0;
	cae_error err;
	cae_error_clear(&err);
	int r = cae_backend_cleanup_stale(cae_session_backend(s), (int64_t)(hours * 3600), &removed,
					  &err);
	/* the warm pool's containers that may not be handed out any more */
	int pool_removed = 0;
	cae_error perr;
	cae_error_clear(&perr);
	int pr = strcmp(cae_backend_name(cae_session_backend(s)), "docker") == 0
		     ? cae_backend_pool_gc(cae_session_backend(s), &pool_removed, &perr)
		     : 0;
	/* what killed processes left: journals of local workspaces, scratch directories */
	unsigned journals = 0, incomplete = 0, scratch = 0;
	/* rollback snapshots on this host of patches killed half-way (the environments' own,
	 * in containers, are restored by cae_worker_recover below) */
	unsigned restored = 0;
	(void)cae_worker_recover_snapshots(NULL, &restored, NULL);
	json_t *envs = NULL;
	cae_error lerr;
	cae_error_clear(&lerr);
	if (cae_backend_list(cae_session_backend(s), &envs, &lerr) == 0) {
		size_t i;
		json_t *e;
		json_array_foreach(envs, i, e)
		{
			const char *hp = json_string_value(json_object_get(e, "host_path"));
			const char *uuid = json_string_value(json_object_get(e, "task_uuid"));
			cae_wsj_stats st;
			if (hp && cae__wsj_recover_path(hp, &st) == 0) {
				journals += st.journals;
				incomplete += st.incomplete;
			}
			/* what a patch killed in the environment left (its journal, recovered
			 * there by the environment's file service) */
			if (uuid)
				(void)cae_worker_recover(cae_session_backend(s), uuid, NULL);
		}
		json_decref(envs);
	}
	int64_t legacy = (int64_t)(hours * 3600) > 3600 ? (int64_t)(hours * 3600) : 3600;
	int g = cae__scratch_gc(NULL, "cae-snap.", legacy, &scratch);
	int g2 = cae__scratch_gc(NULL, "cae-bundle-", legacy, &scratch);
	if (g2 == 0)
		g2 = cae__scratch_gc(NULL, "cae-upload-", legacy, &scratch);
	json_t *j = json_pack("{s:i, s:s, s:i, s:i}", "removed", removed, "backend",
			      cae_backend_name(cae_session_backend(s)), "journals_recovered",
			      (int)journals, "scratch_removed", (int)scratch);
	if (incomplete)
		json_object_set_new(j, "journals_incomplete", json_integer(incomplete));
	if (restored)
		json_object_set_new(j, "snapshots_restored", json_integer(restored));
	if (pool_removed)
		json_object_set_new(j, "pool_removed", json_integer(pool_removed));
	if (pr < 0)
		json_object_set_new(j, "pool_error", json_string(perr.message));
	if (g < 0 || g2 < 0)
		json_object_set_new(j, "scratch_error", json_string(strerror(-(g < 0 ? g : g2))));
	if (r < 0)
		json_object_set_new(j, "error", json_string(err.message));
	cae_cli_print_json(j);
	json_decref(j);
	cae_session_free(s);
	return r == 0 ? 0 : 1;
}
