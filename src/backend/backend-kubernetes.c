/* The kubernetes backend: one pod per task through the Kubernetes API (include/cae/k8s.h),
 * in the configured namespace, named coding-agent-exec-{uuid} in a DNS-safe form (lower
 * case, '_' as '-', with a hash of the uuid when that changed it), labelled cae.task=1,
 * cae.phase (creating, then ready), cae.created_at (seconds since the epoch) and, where a
 * label may hold them, the task uuid and the environment; the exact uuid, environment,
 * creation time, preparer and warnings are annotations. The API server is the source of
 * truth: info, list and cleanup work from any process, from names, labels and annotations.
 *
 * A pod is created in phase creating, labelled with its preparing process, and patched to
 * ready as prepare's last step: a prepare that did not finish shows as "creating" while its
 * preparer lives and "failed" after, which exec refuses and gc removes whatever its age.
 *
 * Security, the Kubernetes way: every container runs as 1000:1000 (runAsNonRoot), drops
 * every capability, allowPrivilegeEscalation false (but the root sidecar of the protected
 * paths, which ends before the environment is ready: see "protected paths" below); CPU and memory
 * limits (and requests) from command_executor.docker.resources, the workspace an emptyDir with
 * sizeLimit from its disk_limit; no service-account token (automountServiceAccountToken false, no
 * service links); activeDeadlineSeconds bounds the pod's life, and the helper ends a pod after
 * docker.helper_lifetime_seconds without a manager, as in containers. The pod API has no pids limit
 * (that is the kubelet's --pod-max-pids): said in the log, not pretended. Tokens never enter the
 * pod spec, its environment or files: the clone's and a push's credentials travel on the
 * helper's channel, as in containers.
 *
 * The helper: the static cae-helper is the main container's PID 1 (`--init`), delivered
 * without a registry: an init container (same image, same user) waits for it in an emptyDir
 * that the manager fills through one exec (`head -c SIZE`: the exec protocol v4 cannot end
 * stdin), then exits; the main container mounts that emptyDir read-only at /.cae. The
 * manager reaches the helper through one long-lived exec of `cae-helper --stream` over the
 * API server's WebSocket, so a command costs a frame on an open stream. Without a static
 * helper on this host the pod runs `sleep infinity` and each command is one exec (the
 * wrapper below). */
#include "backend/backend-internal.h"
#include "cae/net.h"
#include "backend/chan.h"
#include "backend/net-local.h"
#include "backend/pkgcache.h"
#include "backend/envs.h"
#include "backend/snapshot.h"

#include "base/buf.h"
#include "base/chase.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/helper.h"
#include "cae/k8s.h"
#include "cae/log.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/banned.h"

#define NAME_PREFIX "coding-agent-exec-"
#define L_TASK "cae.task"
#define L_UUID "cae.task_uuid"
#define L_ENV "cae.environment"
#define L_CREATED "cae.created_at"
#define L_PHASE "cae.phase"
#define A_UUID "cae.task_uuid"
#define A_ENV "cae.environment"
#define A_CREATED "cae.created_at"
#define A_WARNINGS "cae.warnings"
#define A_PREPARER "cae.preparer"
#define A_HELPER "cae.helper"
#define A_GIT_CREDENTIAL "cae.git_credential"
#define A_FORGE "cae.forge" /* the forge rule's "host:port" (net-local.h) */
#define WORKSPACE "/workspace"
#define PROJECT "/workspace/project"
#define SCRATCH "/workspace/tmp"
#define HELPER_DIR "/.cae"
#define HELPER_PATH HELPER_DIR "/cae-helper"
#define MAIN "main"
#define INSTALL "cae-helper-install"
#define PROTECT "cae-protect"
#define UID 1000
#define POD_START_TIMEOUT_MS 300000
#define DELETE_TIMEOUT_MS 120000
#define OPEN_TIMEOUT_MS 30000
/* the helper's first frame after its exec opened: a node under load may take seconds to start
 * a process in the pod, and a stream missed here costs the environment its helper (each
 * command one exec, no proxy, no caches) until the channel is opened again */
#define HELPER_OPEN_TIMEOUT_MS 30000
#define STOP_TIMEOUT_MS 10000 /* cleanup: a graceful stop of at most 10 s, then the kill */
#define STATS_TIMEOUT_MS 10000

static const char *const pull_policy[] = {"IfNotPresent", "Always", "Never"};

struct k8s_impl {
	cae_k8s *k;
	char *ns;
	cae_chan_table chans; /* this process's streams to the pods' helpers */
	pthread_mutex_t mu;   /* guards claimed */
	json_t *claimed;      /* task uuid -> name of its pod when claimed from the warm pool */
};

static struct k8s_impl *impl_of(cae_backend *b)
{
	return b->impl;
}

/* ---- names ---- */

static bool label_value_ok(const char *v)
{
	size_t n = strlen(v);
	if (n == 0 || n > 63 || !isalnum((unsigned char)v[0]) || !isalnum((unsigned char)v[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)v[i]) && v[i] != '-' && v[i] != '_' && v[i] != '.')
			return false;
	return true;
}

/* coding-agent-exec-{uuid}, DNS-safe: lower case, '_' as '-', and when that changed
 * anything or left a non-alphanumeric end, "-" and 8 hex digits of the uuid's FNV-1a hash
 * (so that "A" and "a" stay two pods). */
static void pod_name(char *buf, size_t size, const char *uuid)
{
	char safe[80];
	size_t n = 0;
	bool changed = false;
	for (const char *p = uuid; *p && n + 1 < sizeof(safe); p++) {
		char c = *p;
		if (c >= 'A' && c <= 'Z') {
			c = (char)(c - 'A' + 'a');
			changed = true;
		} else if (c == '_') {
			c = '-';
			changed = true;
		}
		safe[n++] = c;
	}
	safe[n] = '\0';
	if (n && !isalnum((unsigned char)safe[n - 1]))
		changed = true;
	if (!changed) {
		snprintf(buf, size, NAME_PREFIX "%s", safe);
		return;
	}
	uint32_t h = 2166136261u;
	for (const char *p = uuid; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	snprintf(buf, size, NAME_PREFIX "%s-%08x", safe, h);
}

static const char *meta(json_t *pod, const char *kind, const char *k)
{
	return json_string_value(
	    json_object_get(json_object_get(json_object_get(pod, "metadata"), kind), k));
}

static cae_env_phase pod_phase(const cae_backend *b, json_t *pod, const char **uuid)
{
	const char *u = meta(pod, "annotations", A_UUID);
	const char *name =
	    json_string_value(json_object_get(json_object_get(pod, "metadata"), "name"));
	*uuid = u;
	if (!u || !name || !cae_task_uuid_valid(u) || !meta(pod, "labels", L_TASK))
		return CAE_ENV_NOT_OURS;
	char want[160];
	pod_name(want, sizeof(want), u);
	/* a pod claimed from the warm pool keeps its pool name: its uuid label says whose */
	const char *lu = meta(pod, "labels", L_UUID);
	bool claimed = strncmp(name, CAE_POOL_NAME_PREFIX, strlen(CAE_POOL_NAME_PREFIX)) == 0 &&
		       lu && strcmp(lu, u) == 0;
	if (strcmp(want, name) != 0 && !claimed)
		return CAE_ENV_NOT_OURS;
	const char *ph = meta(pod, "labels", L_PHASE);
	if (ph && strcmp(ph, "ready") == 0)
		return CAE_ENV_FINAL;
	return cae__env_unfinished(b->cfg, meta(pod, "annotations", A_PREPARER),
				   cae__parse_iso8601(meta(pod, "annotations", A_CREATED)), 0);
}

static const char *pod_state(json_t *pod)
{
	return json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
}

/* Whether the pod ended (Succeeded, Failed: it can run nothing any more). */
static bool pod_ended(json_t *pod)
{
	const char *st = pod_state(pod);
	return st && (strcmp(st, "Succeeded") == 0 || strcmp(st, "Failed") == 0);
}

/* The main container's state "terminated" in the pod's status (borrowed), or NULL. */
static json_t *main_terminated(json_t *pod)
{
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(json_object_get(pod, "status"), "containerStatuses"), i,
			   c)
	{
		const char *n = json_string_value(json_object_get(c, "name"));
		if (n && strcmp(n, MAIN) == 0)
			return json_object_get(json_object_get(c, "state"), "terminated");
	}
	return NULL;
}

/* What a pod records (cae_envs_ops.record). */
static void pod_record(const cae_backend *b, json_t *pod, cae_env_record *rec)
{
	memset(rec, 0, sizeof(*rec));
	const char *uuid;
	rec->phase = pod_phase(b, pod, &uuid);
	if (rec->phase == CAE_ENV_NOT_OURS)
		return;
	snprintf(rec->uuid, sizeof(rec->uuid), "%s", uuid);
	const char *st = pod_state(pod);
	if (json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp"))
		snprintf(rec->status, sizeof(rec->status), "removing");
	else if (st && strcmp(st, "Running") == 0)
		snprintf(rec->status, sizeof(rec->status), "ready");
	else
		snprintf(rec->status, sizeof(rec->status), "%s", st ? st : "unknown");
	for (char *c = rec->status; *c; c++)
		*c = (char)tolower((unsigned char)*c);
	rec->id = json_string_value(json_object_get(json_object_get(pod, "metadata"), "uid"));
	rec->environment = meta(pod, "annotations", A_ENV);
	rec->created_at = meta(pod, "annotations", A_CREATED);
	rec->created = cae__parse_iso8601(rec->created_at);
	rec->warnings = meta(pod, "annotations", A_WARNINGS);
	rec->instance = meta(pod, "labels", CAE_LABEL_INSTANCE);
}

static const cae_envs_ops envs_ops;

/* ---- which pod is the task's ----
 * A cold pod is named from its task's uuid (pod_name); one claimed from the warm pool
 * (src/backend/pool-kubernetes.c) keeps its pool name and is found by its uuid label (a
 * claim needs a uuid that a label can hold). This process remembers the pool names it met,
 * so that a lookup costs one call as for a cold pod. */

static void remember_claimed(cae_backend *b, const char *uuid, const char *name)
{
	struct k8s_impl *ki = impl_of(b);
	pthread_mutex_lock(&ki->mu);
	if (name)
		json_object_set_new(ki->claimed, uuid, json_string(name));
	else
		json_object_del(ki->claimed, uuid);
	pthread_mutex_unlock(&ki->mu);
}

/* The name to look uuid's pod up by first: the pool name remembered, else the cold one. */
static void name_of(cae_backend *b, const char *uuid, char *buf, size_t size)
{
	struct k8s_impl *ki = impl_of(b);
	pthread_mutex_lock(&ki->mu);
	const char *n = json_string_value(json_object_get(ki->claimed, uuid));
	if (n)
		snprintf(buf, size, "%s", n);
	pthread_mutex_unlock(&ki->mu);
	if (!n)
		pod_name(buf, size, uuid);
}

/* The pod claimed from the warm pool for uuid, by its labels: 0 and *out (new), -ENOENT. */
static int find_claimed(cae_backend *b, const char *uuid, json_t **out, cae_error *err)
{
	*out = NULL;
	if (!label_value_ok(uuid))
		return -ENOENT;
	char sel[128];
	snprintf(sel, sizeof(sel), "%s=%s", L_UUID, uuid);
	json_t *items = NULL;
	int r = cae_k8s_pod_list(impl_of(b)->k, impl_of(b)->ns, sel, &items, err);
	if (r < 0)
		return r;
	size_t i;
	json_t *pod;
	json_array_foreach(items, i, pod)
	{
		const char *u, *name = json_string_value(
				   json_object_get(json_object_get(pod, "metadata"), "name"));
		if (pod_phase(b, pod, &u) != CAE_ENV_NOT_OURS && strcmp(u, uuid) == 0 && name &&
		    strncmp(name, CAE_POOL_NAME_PREFIX, strlen(CAE_POOL_NAME_PREFIX)) == 0) {
			*out = json_incref(pod);
			remember_claimed(b, uuid, name);
			break;
		}
	}
	json_decref(items);
	return *out ? 0 : -ENOENT;
}

/* The pod of uuid when it is that task's (-ENOENT otherwise). */
static int get_pod(cae_backend *b, const char *uuid, json_t **out, cae_error *err)
{
	char name[160], cold[160];
	name_of(b, uuid, name, sizeof(name));
	pod_name(cold, sizeof(cold), uuid);
	int r = cae_k8s_pod_get(impl_of(b)->k, impl_of(b)->ns, name, out, err);
	if (r == -ENOENT && strcmp(name, cold) != 0) {
		/* the pool pod remembered went: the task may have a cold pod since */
		remember_claimed(b, uuid, NULL);
		r = cae_k8s_pod_get(impl_of(b)->k, impl_of(b)->ns, cold, out, err);
	}
	if (r < 0 && r != -ENOENT)
		return r;
	const char *u = r == 0 ? meta(*out, "annotations", A_UUID) : NULL;
	if (!u || strcmp(u, uuid) != 0) {
		json_decref(*out);
		*out = NULL;
		remember_claimed(b, uuid, NULL);
		r = find_claimed(b, uuid, out, err);
		if (r == -ENOENT)
			return cae_error_set(err, -ENOENT, "no environment for task %s", uuid);
		return r;
	}
	return 0;
}

/* ---- the plain exec (no helper) ----
 * sh -c WRAPPER cae-exec CWD N ARGC: stdin holds, one a line, the K=V to export up to an
 * empty line (extra environment: never in the exec URL, which the API server may log), then
 * the command's ARGC arguments (also not in the URL: libwebsockets sends at most 2 KiB of
 * it), each with "\\" for a backslash and "\n" for a newline; then the working directory
 * must resolve beneath the workspace, and the command runs with the next N bytes of stdin
 * (N < 0: none; the exec protocol v4 cannot end stdin). */
static const char wrapper[] =
    "c=$1 n=$2 a=$3; shift 3\n"
    "while IFS= read -r l; do [ -z \"$l\" ] && break; export \"$l\"; done\n"
    "while [ \"$a\" -gt 0 ]; do IFS= read -r l; case $l in *\\\\*) l=$(printf '%bx' \"$l\"); "
    "l=${l%x};; esac; set -- \"$@\" \"$l\"; a=$((a - 1)); done\n"
    "cd -P \"$c\" 2>/dev/null || { echo \"cae-exec: no such directory: $c\" >&2; exit 126; }\n"
    "case $PWD/ in " WORKSPACE "/*) ;; *) echo 'cae-exec: outside the workspace' >&2; "
    "exit 126;; esac\n"
    "command -v \"$1\" >/dev/null 2>&1 || { echo 'cae-exec: notfound' >&2; exit 127; }\n"
    "if [ \"$n\" -ge 0 ]; then head -c \"$n\" | \"$@\"; else \"$@\" </dev/null; fi\n";

/* arg on one line of the wrapper's stdin: backslash and newline escaped. */
static int put_arg(cae_buf *in, const char *arg)
{
	int r = 0;
	for (const char *c = arg; r == 0 && *c; c++)
		r = *c == '\\'	 ? cae__buf_append(in, "\\\\", 2)
		    : *c == '\n' ? cae__buf_append(in, "\\n", 2)
				 : cae__buf_append(in, c, 1);
	return r == 0 ? cae__buf_append(in, "\n", 1) : r;
}

static int plain_exec(cae_backend *b, const char *uuid, const cae_exec_request *req,
		      const char *cwd, cae_run_result *res, cae_error *err)
{
	char pod[160];
	name_of(b, uuid, pod, sizeof(pod));
	size_t argc = 0;
	while (req->argv[argc])
		argc++;
	cae_buf in;
	cae__buf_init(&in, SIZE_MAX);
	char n[24], nargs[24];
	snprintf(n, sizeof(n), "%lld", req->has_stdin ? (long long)req->stdin_len : -1LL);
	snprintf(nargs, sizeof(nargs), "%zu", argc);
	int r = 0;
	for (const char *const *e = req->extra_env; r == 0 && e && *e; e++)
		r = strchr(*e, '\n') ? -EINVAL : cae__buf_printf(&in, "%s\n", *e);
	if (r == 0)
		r = cae__buf_append(&in, "\n", 1);
	for (size_t i = 0; r == 0 && i < argc; i++)
		r = put_arg(&in, req->argv[i]);
	if (r == 0 && req->has_stdin && req->stdin_len)
		r = cae__buf_append(&in, req->stdin_data, req->stdin_len);
	if (r < 0) {
		cae__buf_clear(&in);
		return cae_error_set(err, r,
				     r == -EINVAL ? "an environment value holds a newline"
						  : "out of memory");
	}
	const char *argv[] = {"sh", "-c", wrapper, "cae-exec", cwd, n, nargs, NULL};
	r = cae_k8s_exec(impl_of(b)->k, impl_of(b)->ns, pod, MAIN, argv, in.data, in.len,
			 req->timeout_ms, req->max_stdout, req->max_stderr, req->cancel_fd, res,
			 err);
	cae__buf_clear(&in);
	if (r == 0 && res->exit_code == 127 && res->err &&
	    strcmp(res->err, "cae-exec: notfound\n") == 0) {
		cae_run_result_clear(res);
		return cae_error_set(err, -ENOENT, "command not found: %s", req->argv[0]);
	}
	if (r == 0 && res->exit_code == 126 && res->err &&
	    strncmp(res->err, "cae-exec: ", 10) == 0 && !strstr(res->err, "notfound")) {
		r = cae_error_set(err, -ENOTDIR, "%.*s", (int)strcspn(res->err + 10, "\n"),
				  res->err + 10);
		cae_run_result_clear(res);
	}
	return r;
}

/* ---- the helper channel ---- */

static ssize_t link_read(void *ctx, char *buf, size_t n)
{
	return cae_k8s_stream_read(ctx, buf, n);
}

static int link_write(void *ctx, const void *p, size_t n)
{
	return cae_k8s_stream_write(ctx, p, n);
}

static void link_close(void *ctx)
{
	cae_k8s_stream_close(ctx);
}

/* Whether uuid's pod can run a command: -ENOENT (gone), -EAGAIN (not ready), 0. *pod gets
 * it (new reference). preparing: for the prepare's own commands (its phase is creating). */
static int usable(cae_backend *b, const char *uuid, bool preparing, json_t **pod, cae_error *err)
{
	cae_error e = {0};
	int r = get_pod(b, uuid, pod, &e);
	if (r == -ENOENT)
		return cae_error_set(err, -ENOENT, "environment gone: no pod for task %s", uuid);
	if (r < 0)
		return cae_error_set(err, r, "%s", e.message);
	if (json_object_get(json_object_get(*pod, "metadata"), "deletionTimestamp")) {
		json_decref(*pod);
		*pod = NULL;
		return cae_error_set(err, -ENOENT,
				     "environment gone: the pod of task %s is being "
				     "deleted",
				     uuid);
	}
	const char *u;
	cae_env_phase ph = pod_phase(b, *pod, &u);
	const char *st = pod_state(*pod);
	json_t *term = main_terminated(*pod);
	if (!preparing && (ph == CAE_ENV_CREATING || ph == CAE_ENV_FAILED))
		r = cae__env_not_ready(uuid, ph, err);
	else if (pod_ended(*pod))
		r = cae_error_set(
		    err, -ENOENT, "environment gone: the pod of task %s has ended%s", uuid,
		    json_integer_value(json_object_get(term, "exitCode")) == CAE_HELPER_INIT_EXPIRED
			? " (its helper ended it after command_executor.docker."
			  "helper_lifetime_seconds without a manager)"
			: "");
	else if (!st || strcmp(st, "Running") != 0)
		r = cae_error_set(err, -EAGAIN, "environment %s is not ready: its pod is %s", uuid,
				  st ? st : "unknown");
	if (r < 0) {
		json_decref(*pod);
		*pod = NULL;
	}
	return r;
}

/* The channel to uuid's helper (cae_chan_ops.open): a stream, none when the pod has no
 * helper, or none with why set when its helper did not answer. Fails (-ENOENT, -EAGAIN)
 * when the pod cannot run anything (usable). */
static int chan_open(cae_backend *b, cae_chan *c, bool preparing, cae_error *err)
{
	json_t *pod = NULL;
	int r = usable(b, c->uuid, preparing, &pod, err);
	if (r < 0)
		return r;
	/* another instance's pod runs nothing of ours (it is "not found" to us) */
	if (!preparing && !cae__backend_own(b, meta(pod, "labels", CAE_LABEL_INSTANCE))) {
		json_decref(pod);
		return cae_error_set(err, -ENOENT, "no environment for task %s", c->uuid);
	}
	if (!meta(pod, "annotations", A_HELPER)) {
		json_decref(pod);
		return 0;
	}
	char name[160], hb[16];
	snprintf(name, sizeof(name), "%s",
		 json_string_value(json_object_get(json_object_get(pod, "metadata"), "name")));
	cae__chan_heartbeat(b->cfg, hb, sizeof(hb));
	const char *argv[] = {HELPER_PATH, "--stream", "--heartbeat", hb, NULL};
	cae_k8s_stream *st = NULL;
	cae_error e = {0};
	r = cae_k8s_exec_open(impl_of(b)->k, impl_of(b)->ns, name, MAIN, argv, OPEN_TIMEOUT_MS, &st,
			      &e);
	if (r == 0) {
		cae_helper_link link = {.fd = cae_k8s_stream_fd(st),
					.read = link_read,
					.write = link_write,
					.close = link_close,
					.ctx = st};
		r = cae_helper_mux_open(&link, HELPER_OPEN_TIMEOUT_MS, &c->m, &e);
	}
	if (r == 0) {
		cae__chan_credentials(c, meta(pod, "annotations", A_GIT_CREDENTIAL));
		const char *forge = meta(pod, "annotations", A_FORGE);
		c->forge = forge ? strdup(forge) : NULL;
	} else {
		c->m = NULL;
		cae__chan_unanswered(c, &e);
	}
	json_decref(pod);
	return 0;
}

/* The stream failed during a call (cae_chan_ops.gone): -ECONNABORTED when the pod went or
 * stopped, 0 when only the helper did. */
static int pod_gone(cae_backend *b, const char *uuid, cae_error *err)
{
	json_t *pod = NULL;
	cae_error e = {0};
	int g = usable(b, uuid, true, &pod, &e);
	json_decref(pod);
	return g < 0 ? cae_error_set(err, -ECONNABORTED, "%s", e.message) : 0;
}

/* A channel without a helper is looked at again for every command: the pod may be gone. */
static const cae_chan_ops chan_ops = {
    .open = chan_open,
    .gone = pod_gone,
    .plain = plain_exec,
    .workspace = WORKSPACE,
    .project = PROJECT,
    .what = "pod",
    .plain_how = "one API server exec",
    .reopen_plain = true,
    .serve_caches = true,
};

static int k8s_exec(cae_backend *b, const char *uuid, const cae_exec_request *req,
		    cae_run_result *res, cae_error *err)
{
	memset(res, 0, sizeof(*res));
	return cae__chan_exec(&impl_of(b)->chans, uuid, false, req, res, err);
}

static int k8s_edit(cae_backend *b, const char *uuid, const cae_editor_limits *limits,
		    const cae_editor_request *req, cae_editor_result *res, cae_error *err)
{
	return cae__chan_edit(&impl_of(b)->chans, uuid, limits, req, res, err);
}

static int k8s_fs(cae_backend *b, const char *uuid, const cae_fs_request *q, cae_fs_reply *rep,
		  cae_error *err)
{
	return cae__chan_fs(&impl_of(b)->chans, uuid, q, rep, err);
}

/* ---- removal ---- */

/* Deletes uuid's pod at once (grace 0: its commands are killed) and waits until the API
 * no longer has it, so that the name is free again. A missing pod is success. */
static int remove_pod_only(cae_backend *b, const char *uuid, cae_error *err)
{
	struct k8s_impl *ki = impl_of(b);
	char name[160], cold[160];
	name_of(b, uuid, name, sizeof(name));
	pod_name(cold, sizeof(cold), uuid);
	cae_error e = {0};
	int r = cae_k8s_pod_delete(ki->k, ki->ns, name, 0, &e);
	if (r == -ENOENT && strcmp(name, cold) != 0) {
		/* the pool pod remembered went: the task may have a cold pod since */
		snprintf(name, sizeof(name), "%s", cold);
		r = cae_k8s_pod_delete(ki->k, ki->ns, name, 0, &e);
	}
	if (r == -ENOENT) {
		/* none by that name: one claimed from the warm pool, else none at all */
		json_t *pod = NULL;
		remember_claimed(b, uuid, NULL);
		r = find_claimed(b, uuid, &pod, &e);
		if (r == 0)
			snprintf(name, sizeof(name), "%s",
				 json_string_value(
				     json_object_get(json_object_get(pod, "metadata"), "name")));
		json_decref(pod);
		if (r == 0)
			r = cae_k8s_pod_delete(ki->k, ki->ns, name, 0, &e);
		remember_claimed(b, uuid, NULL);
		if (r == -ENOENT)
			return 0;
	}
	if (r < 0)
		return cae_error_set(err, r, "could not remove pod %s: %s", name, e.message);
	remember_claimed(b, uuid, NULL);
	int64_t deadline = cae__now_ms() + DELETE_TIMEOUT_MS;
	long pause_ms = 50;
	for (;;) {
		json_t *pod = NULL;
		r = cae_k8s_pod_get(ki->k, ki->ns, name, &pod, &e);
		json_decref(pod);
		if (r == -ENOENT)
			return 0;
		if (r < 0)
			return cae_error_set(err, r, "pod %s: %s", name, e.message);
		if (cae__now_ms() >= deadline)
			return cae_error_set(err, -ETIMEDOUT, "pod %s still there after %d s", name,
					     DELETE_TIMEOUT_MS / 1000);
		nanosleep(&(struct timespec){0, pause_ms * 1000000L}, NULL);
		if (pause_ms < 250)
			pause_ms += 50;
	}
}

/* The pod, then its NetworkPolicy (net-kubernetes.c; named as the cold pod). */
static int remove_pod(cae_backend *b, const char *uuid, cae_error *err)
{
	int r = remove_pod_only(b, uuid, err);
	if (r < 0)
		return r;
	char cold[160];
	pod_name(cold, sizeof(cold), uuid);
	return cae__k8s_egress_delete(impl_of(b)->k, impl_of(b)->ns, cold, err);
}

static int main_ended(json_t *pod, void *ud, cae_error *err)
{
	(void)ud;
	(void)err;
	return pod_ended(pod) || main_terminated(pod) ? 1 : 0;
}

/* The graceful stop of uuid's pod: its helper (PID 1) is sent SIGTERM, which it passes on
 * to every process (a command's trap runs) and kills what is left after its grace, as on a
 * `docker stop`; then this waits until the API says the main container ended, at most
 * STOP_TIMEOUT_MS. Deleting with a grace period instead would cost the kubelet's status
 * sync (10-60 s here) however fast the pod stops. A pod without the helper, or not running,
 * has nothing to stop. */
static void stop_helper(cae_backend *b, const char *uuid)
{
	struct k8s_impl *ki = impl_of(b);
	json_t *pod = NULL;
	if (get_pod(b, uuid, &pod, NULL) < 0)
		return;
	const char *st = pod_state(pod);
	char name[160];
	snprintf(name, sizeof(name), "%s",
		 json_string_value(json_object_get(json_object_get(pod, "metadata"), "name")));
	bool stop = meta(pod, "annotations", A_HELPER) && st && strcmp(st, "Running") == 0 &&
		    !main_terminated(pod) &&
		    !json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp");
	json_decref(pod);
	if (!stop)
		return;
	const char *argv[] = {"sh", "-c", "kill -TERM 1", NULL};
	cae_run_result res;
	cae_error e = {0};
	if (cae_k8s_exec(ki->k, ki->ns, name, MAIN, argv, NULL, 0, OPEN_TIMEOUT_MS, 0, 0, -1, &res,
			 &e) < 0)
		return;
	cae_run_result_clear(&res);
	if (cae_k8s_pod_wait(ki->k, ki->ns, name, main_ended, NULL, STOP_TIMEOUT_MS, NULL, &e) < 0)
		cae_log_fields(b->log, CAE_LOG_WARN, "kubernetes.stop_incomplete",
			       json_pack("{s:s, s:s}", "task_uuid", uuid, "pod", name),
			       "%s: deleting it at once", e.message);
}

/* cleanup (graceful): the helper's stop, then the delete; a re-prepare's removal (not
 * graceful) deletes at once. */
static int k8s_remove(cae_backend *b, const char *uuid, bool graceful, cae_error *err)
{
	cae__chan_forget(&impl_of(b)->chans, uuid);
	if (graceful)
		stop_helper(b, uuid);
	int r = remove_pod(b, uuid, err);
	if (r == 0)
		cae__snapshot_k8s_drop(b, uuid);
	return r;
}

/* ---- prepare ---- */

struct prep_ctx {
	cae_backend *b;
	const char *uuid;
	int cancel_fd;
};

struct k8s_prep {
	const char *image;
	char *helper; /* the static helper to deliver; NULL: none on this host */
	char *git_credential;
	bool protect; /* the pod has the root sidecar that makes protected_paths root's */
	struct prep_ctx pc;
};

static struct k8s_prep *prep_of(cae_prepare *p)
{
	return p->state;
}

/* Commands of the prepare (clone, dependencies): through the helper as every command, so
 * that the clone's token goes over its channel and never into an exec URL. */
static int prep_exec(void *ctx, const cae_exec_request *req, cae_run_result *res, cae_error *err)
{
	struct prep_ctx *pc = ctx;
	cae_exec_request q = *req;
	if (!q.cwd)
		q.cwd = WORKSPACE;
	if (q.cancel_fd < 0)
		q.cancel_fd = pc->cancel_fd;
	memset(res, 0, sizeof(*res));
	return cae__chan_exec(&impl_of(pc->b)->chans, pc->uuid, true, &q, res, err);
}

static int k8s_validate(cae_prepare *p, cae_error *err)
{
	const cae_config *cfg = p->b->cfg;
	struct k8s_prep *kp = calloc(1, sizeof(*kp));
	if (!kp)
		return cae_error_set(err, -ENOMEM, "out of memory");
	p->state = kp;
	kp->image = cae_config_environment_image(cfg, p->environment);
	if (!kp->image)
		kp->image = cfg->command_executor.docker.base_image;
	if (!kp->image)
		return cae_error_set(err, -EINVAL, "no image for environment %s", p->environment);
	/* the workspace's emptyDir has a sizeLimit of disk_limit (the kubelet evicts the pod
	 * past it) */
	uint64_t disk = cfg->command_executor.docker.resources.disk_bytes;
	p->limits = json_pack("{s:{s:s, s:o?}}", "disk", "mechanism", disk ? "emptydir" : "none",
			      "bytes", disk ? json_integer((json_int_t)disk) : NULL);
	if (cae_helper_find_static(&kp->helper) < 0) {
		kp->helper = NULL;
		cae__prepare_warn(p, "kubernetes.no_helper",
				  "cae-helper-static was not found on this host: every command is "
				  "one API server exec and the text editor is not available");
	}
	if (cfg->command_executor.protected_paths.n) {
		kp->protect = cfg->command_executor.kubernetes.protect_with_root_sidecar;
		/* said in ContainerInfo.warnings and the log: never pretended */
		if (!kp->protect)
			cae__prepare_warn(
			    p, "kubernetes.protected_paths_unenforced",
			    "command_executor.protected_paths are not read-only to commands in "
			    "this environment: command_executor.kubernetes."
			    "protect_with_root_sidecar is false, so nothing in the pod can give "
			    "them to root");
	}
	return 0;
}

/* The NetworkPolicy denying the pod's egress (net-kubernetes.c), before the pod, and what
 * holds said in the warnings: without it (no permission), the pod keeps the cluster's
 * network, a failed prepare only when kubernetes.require_network_policy says so. */
static int deny_egress(cae_prepare *p, cae_error *err)
{
	const cae_config *cfg = p->b->cfg;
	struct k8s_impl *ki = impl_of(p->b);
	if (!cae__k8s_egress_denied(cfg))
		return 0;
	char name[160], msg[2048];
	pod_name(name, sizeof(name), p->task->uuid);
	cae_error e = {0};
	int r = cae__k8s_egress_create(ki->k, ki->ns, name, p->task->uuid, p->b->instance, &e);
	if (r < 0 && cfg->command_executor.kubernetes.require_network_policy)
		return cae_error_set(err, r,
				     "NetworkPolicy %s (kubernetes.require_network_policy; needs "
				     "networkpolicies create and delete in namespace %s): %s",
				     name, ki->ns, e.message);
	bool host = cfg->command_executor.docker.network.mode == CAE_CONFIG_NETWORK_HOST;
	if (r < 0)
		snprintf(
		    msg, sizeof(msg),
		    "the pod's egress is not denied: NetworkPolicy %s could not be made (it "
		    "needs networkpolicies create and delete in namespace %s): %.512s. Commands "
		    "get cae's proxy (the pod's helper carries it over the exec stream), but "
		    "a program that ignores the proxy variables keeps the cluster's network",
		    name, ki->ns, e.message);
	else
		snprintf(msg, sizeof(msg),
			 "NetworkPolicy %s denies the pod's egress (its way out is cae's proxy, "
			 "over the helper's exec stream), but only a network plugin that enforces "
			 "NetworkPolicy applies it%s: cae cannot tell whether this cluster's does; "
			 "where it does not, a program that ignores the proxy variables keeps the "
			 "cluster's network",
			 name,
			 host ? ", and none does for a pod on the host's network (mode host)" : "");
	cae__prepare_warn(
	    p, r < 0 ? "kubernetes.network_policy_failed" : "kubernetes.egress_unenforced", msg);
	return 0;
}

static json_t *security_context(void)
{
	return json_pack("{s:i, s:i, s:b, s:b, s:{s:[s]}}", "runAsUser", UID, "runAsGroup", UID,
			 "runAsNonRoot", 1, "allowPrivilegeEscalation", 0, "capabilities", "drop",
			 "ALL");
}

/* The root sidecar of the protected paths (see "protected paths" below): root, but only
 * CAP_CHOWN (chown of the user's files; chmod needs nothing more once they are root's), no
 * privilege escalation, the workspace only, tiny resources; its working directory is "/"
 * (the image's, as root, would be made in the workspace before the clone). PID 1 is a
 * shell that waits until SIGTERM (its trap; `wait` returns at once on it), so that one exec of
 * `kill 1` ends it. */
static json_t *protect_container(const char *image, const char *pull)
{
	return json_pack(
	    "{s:s, s:s, s:s, s:[s, s, s], s:s, s:[{s:s, s:s}], s:{s:i, s:i, s:b, s:b, s:{s:[s], "
	    "s:[s]}},"
	    " s:{s:{s:s, s:s}, s:{s:s, s:s}}}",
	    "name", PROTECT, "image", image, "imagePullPolicy", pull, "command", "sh", "-c",
	    "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done", "workingDir", "/",
	    "volumeMounts", "name", "workspace", "mountPath", WORKSPACE, "securityContext",
	    "runAsUser", 0, "runAsGroup", 0, "runAsNonRoot", 0, "allowPrivilegeEscalation", 0,
	    "capabilities", "drop", "ALL", "add", "CHOWN", "resources", "limits", "cpu", "200m",
	    "memory", "64Mi", "requests", "cpu", "1m", "memory", "8Mi");
}

static json_t *pod_spec(cae_prepare *p)
{
	const cae_config *cfg = p->b->cfg;
	struct k8s_prep *kp = prep_of(p);
	const __typeof__(cfg->command_executor.docker.resources) *rs =
	    &cfg->command_executor.docker.resources;
	char name[160];
	pod_name(name, sizeof(name), p->task->uuid);
	json_t *limits = json_object();
	if (rs->cpu_limit > 0) {
		char cpu[32];
		snprintf(cpu, sizeof(cpu), "%lldm", (long long)(rs->cpu_limit * 1000 + 0.5));
		json_object_set_new(limits, "cpu", json_string(cpu));
	}
	if (rs->memory_bytes > 0) {
		char mem[32];
		snprintf(mem, sizeof(mem), "%llu", (unsigned long long)rs->memory_bytes);
		json_object_set_new(limits, "memory", json_string(mem));
	}
	json_t *ws = json_object();
	if (rs->disk_bytes > 0) {
		char disk[32];
		snprintf(disk, sizeof(disk), "%llu", (unsigned long long)rs->disk_bytes);
		json_object_set_new(ws, "sizeLimit", json_string(disk));
	}
	const char *pull = pull_policy[cfg->command_executor.kubernetes.image_pull_policy % 3];
	/* the helper ends the pod after its lifetime without a manager, as in containers */
	char lifetime[24];
	snprintf(lifetime, sizeof(lifetime), "%d",
		 cfg->command_executor.docker.helper_lifetime_seconds);
	json_t *cmd = kp->helper
			  ? json_pack("[s, s, s, s]", HELPER_PATH, "--init", "--lifetime", lifetime)
			  : json_pack("[s, s]", "sleep", "infinity");
	json_t *mounts = json_pack("[{s:s, s:s}]", "name", "workspace", "mountPath", WORKSPACE);
	if (kp->helper)
		json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "name", "cae",
							"mountPath", HELPER_DIR, "readOnly", 1));
	/* requests: what placement reserves; small, so that idle environments do not hold a
	 * node's capacity (the limits are what bounds a command) */
	json_t *requests = json_pack("{s:s, s:s}", "cpu", "10m", "memory", "32Mi");
	json_t *main =
	    json_pack("{s:s, s:s, s:s, s:o, s:s, s:o, s:o, s:{s:o, s:o}}", "name", MAIN, "image",
		      kp->image, "imagePullPolicy", pull, "command", cmd, "workingDir", WORKSPACE,
		      "volumeMounts", mounts, "securityContext", security_context(), "resources",
		      "limits", limits, "requests", requests);
	json_t *volumes = json_pack("[{s:s, s:o}]", "name", "workspace", "emptyDir", ws);
	json_t *spec = json_pack(
	    "{s:s, s:b, s:b, s:i, s:i, s:{s:i, s:i, s:b, s:{s:s}}, s:b, s:o, s:[o]}",
	    "restartPolicy", "Never", "automountServiceAccountToken", 0, "enableServiceLinks", 0,
	    "activeDeadlineSeconds", cfg->command_executor.kubernetes.active_deadline_seconds,
	    "terminationGracePeriodSeconds", 10, "securityContext", "runAsUser", UID, "runAsGroup",
	    UID, "runAsNonRoot", 1, "seccompProfile", "type", "RuntimeDefault", "hostNetwork",
	    cfg->command_executor.docker.network.mode == CAE_CONFIG_NETWORK_HOST, "volumes",
	    volumes, "containers", main);
	if (kp->helper) {
		json_array_append_new(volumes, json_pack("{s:s, s:{}}", "name", "cae", "emptyDir"));
		json_object_set_new(spec, "initContainers",
				    json_pack("[{s:s, s:s, s:s, s:[s, s, s], s:[{s:s, s:s}], s:o}]",
					      "name", INSTALL, "image", kp->image,
					      "imagePullPolicy", pull, "command", "sh", "-c",
					      "while [ ! -e " HELPER_PATH " ]; do sleep 0.1; done",
					      "volumeMounts", "name", "cae", "mountPath",
					      HELPER_DIR, "securityContext", security_context()));
	}
	if (kp->protect)
		json_array_append_new(json_object_get(spec, "containers"),
				      protect_container(kp->image, pull));
	if (cfg->command_executor.kubernetes.node_name)
		json_object_set_new(spec, "nodeName",
				    json_string(cfg->command_executor.kubernetes.node_name));
	_cleanup_free_ char *wtext = json_dumps(p->warnings, JSON_COMPACT);
	char preparer[CAE_PREPARER_MAX], epoch[24];
	cae__preparer_label(preparer, sizeof(preparer));
	snprintf(epoch, sizeof(epoch), "%lld", (long long)cae__parse_iso8601(p->created_at));
	json_t *labels = json_pack("{s:s, s:s, s:s, s:s}", L_TASK, "1", L_PHASE, "creating",
				   L_CREATED, epoch, CAE_LABEL_INSTANCE, p->b->instance);
	if (label_value_ok(p->task->uuid))
		json_object_set_new(labels, L_UUID, json_string(p->task->uuid));
	if (label_value_ok(p->environment))
		json_object_set_new(labels, L_ENV, json_string(p->environment));
	if (cae__k8s_egress_denied(cfg)) {
		char egress[64];
		cae__k8s_egress_label(name, egress, sizeof(egress));
		json_object_set_new(labels, CAE_K8S_EGRESS_LABEL, json_string(egress));
	}
	json_t *ann = json_pack("{s:s, s:s, s:s, s:s, s:s}", A_UUID, p->task->uuid, A_ENV,
				p->environment, A_CREATED, p->created_at, A_WARNINGS,
				wtext ? wtext : "[]", A_PREPARER, preparer);
	if (kp->helper)
		json_object_set_new(ann, A_HELPER, json_string("1"));
	if (kp->git_credential)
		json_object_set_new(ann, A_GIT_CREDENTIAL, json_string(kp->git_credential));
	char *forge = cae__net_forge(cfg, p->task);
	if (forge)
		json_object_set_new(ann, A_FORGE, json_string(forge));
	free(forge);
	return json_pack("{s:s, s:s, s:{s:s, s:o, s:o}, s:o}", "apiVersion", "v1", "kind", "Pod",
			 "metadata", "name", name, "labels", labels, "annotations", ann, "spec",
			 spec);
}

static int init_running(json_t *pod, void *ud, cae_error *err)
{
	(void)ud;
	json_t *st = json_object_get(pod, "status");
	json_t *ic = json_array_get(json_object_get(st, "initContainerStatuses"), 0);
	if (json_object_get(json_object_get(ic, "state"), "running"))
		return 1;
	if (json_object_get(json_object_get(ic, "state"), "terminated"))
		return cae_error_set(err, -ECHILD, "the helper's init container ended early");
	int r = cae_k8s_pod_running(pod, NULL, err);
	return r == 1 ? cae_error_set(err, -ECHILD, "pod runs without its helper") : r;
}

/* The init container ended well: it ends (0) only once HELPER_PATH is there. */
static int init_done(json_t *pod, void *ud, cae_error *err)
{
	(void)ud;
	json_t *ic = json_array_get(
	    json_object_get(json_object_get(pod, "status"), "initContainerStatuses"), 0);
	json_t *term = json_object_get(json_object_get(ic, "state"), "terminated");
	if (!term)
		return 0;
	return json_integer_value(json_object_get(term, "exitCode")) == 0
		   ? 1
		   : cae_error_set(err, -ECHILD, "the helper's init container failed");
}

/* Fills the emptyDir through the init container: `head -c SIZE` takes the helper's bytes
 * (the exec protocol v4 cannot end stdin), then it becomes HELPER_PATH, mode 0555. The init
 * container ends as soon as it sees HELPER_PATH, and its end kills what still runs in it:
 * the delivery's shell, between its `mv` and its exit, may then be killed (137) though the
 * helper is in place, which the init container's own exit 0 says. */
static int deliver_helper(cae_prepare *p, const char *pod, cae_error *err)
{
	struct k8s_impl *ki = impl_of(p->b);
	char *data = NULL;
	size_t len = 0;
	int r = cae__read_file(AT_FDCWD, prep_of(p)->helper, 64 * 1024 * 1024, &data, &len);
	if (r < 0)
		return cae_error_set(err, r, "cae-helper: %s", strerror(-r));
	char size[24];
	snprintf(size, sizeof(size), "%zu", len);
	const char *argv[] = {"sh",
			      "-c",
			      "head -c \"$1\" > " HELPER_DIR "/.h && chmod 0555 " HELPER_DIR
			      "/.h && mv " HELPER_DIR "/.h " HELPER_PATH,
			      "sh",
			      size,
			      NULL};
	cae_run_result res;
	r = cae_k8s_exec(ki->k, ki->ns, pod, INSTALL, argv, data, len, 120000, 0, 0, p->cancel_fd,
			 &res, err);
	free(data);
	if (r < 0)
		return cae_error_prefix(err, "cae-helper delivery");
	if (res.exit_code == 128 + 9 && !res.timed_out && !res.cancelled &&
	    cae_k8s_pod_wait(ki->k, ki->ns, pod, init_done, NULL, 30000, NULL, NULL) == 0)
		res.exit_code = 0;
	if (res.exit_code != 0 || res.timed_out || res.cancelled)
		r = res.cancelled ? cae_error_set(err, -ECANCELED, "cancelled")
		    : res.timed_out
			? cae_error_set(err, -ETIMEDOUT,
					"cae-helper delivery did not end within 120 s")
			: cae_error_set(err, -EIO, "cae-helper delivery failed (exit code %d): %s",
					res.exit_code,
					res.err && res.err[0] ? res.err : "no message");
	cae_run_result_clear(&res);
	return r;
}

/* The claim of a warm pool pod for p's task (src/backend/pool-kubernetes.c) when its
 * pool's key is that of pod, the pod this prepare would create: 1 when claimed (p set up as
 * a cold create would), 0 when none was (a cold create follows). The claim gives the pool
 * pod the labels and annotations pod has (the task's uuid, phase creating, this preparer,
 * the credential target), so that from there it is the task's pod but for its name. */
static int claim_warm(cae_prepare *p, json_t *pod, cae_error *err)
{
	struct k8s_prep *kp = prep_of(p);
	if (!cae__pool_wanted(p->b->cfg, p->environment) || !label_value_ok(p->task->uuid))
		return 0;
	int64_t t0 = cae__now_ms();
	char key[CAE_POOL_KEY_MAX], name[160];
	if (cae__pool_key(p->b, json_object_get(pod, "spec"), kp->helper, key) < 0)
		return 0; /* out of memory: a cold create says so if it persists */
	json_t *md = json_object_get(pod, "metadata");
	json_t *patch =
	    json_pack("{s:{s:O, s:O}}", "metadata", "labels", json_object_get(md, "labels"),
		      "annotations", json_object_get(md, "annotations"));
	if (!patch)
		return cae_error_set(err, -ENOMEM, "out of memory");
	json_object_set_new(json_object_get(json_object_get(patch, "metadata"), "annotations"),
			    CAE_POOL_LABEL, json_string(key));
	int r = cae__k8s_pool_claim(p->b, key, patch, name, sizeof(name), err);
	json_decref(patch);
	if (r <= 0)
		return r;
	/* one pod per task: a prepare of the same task may have made or claimed another
	 * meanwhile; then this one goes, and the cold create meets the other */
	struct k8s_impl *ki = impl_of(p->b);
	char sel[128];
	snprintf(sel, sizeof(sel), "%s=%s", L_UUID, p->task->uuid);
	json_t *same = NULL;
	cae_error e = {0};
	if (cae_k8s_pod_list(ki->k, ki->ns, sel, &same, &e) < 0 || json_array_size(same) != 1) {
		json_decref(same);
		cae_log_fields(p->b->log, CAE_LOG_WARN, "pool.claim_failed",
			       json_pack("{s:s, s:s}", "pod", name, "task_uuid", p->task->uuid),
			       "%s", e.message[0] ? e.message : "another pod of the task exists");
		(void)cae_k8s_pod_delete(ki->k, ki->ns, name, 0, NULL);
		return 0;
	}
	json_decref(same);
	remember_claimed(p->b, p->task->uuid, name);
	p->create_fields =
	    json_pack("{s:s, s:s, s:s, s:b, s:b, s:s, s:I}", "pod", name, "namespace", ki->ns,
		      "image", kp->image, "helper", kp->helper != NULL, "pool", 1, "pool_key", key,
		      "claim_ms", (json_int_t)(cae__now_ms() - t0));
	kp->pc = (struct prep_ctx){.b = p->b, .uuid = p->task->uuid, .cancel_fd = p->cancel_fd};
	p->exec = prep_exec;
	p->exec_ctx = &kp->pc;
	p->project = PROJECT;
	cae__backend_pool_wake(p->b);
	return 1;
}

static int k8s_create(cae_prepare *p, cae_error *err)
{
	struct k8s_prep *kp = prep_of(p);
	struct k8s_impl *ki = impl_of(p->b);
	/* a URL or {platform, owner, name} alike: where a push may authenticate */
	kp->git_credential = cae__git_credential_record(p->b->cfg, p->task);
	if (p->b->cfg->command_executor.docker.resources.pids_limit > 0)
		cae_log_fields(
		    p->b->log, CAE_LOG_INFO, "kubernetes.pids_limit_unsupported",
		    json_pack("{s:s}", "task_uuid", p->task->uuid),
		    "the pod API has no pids limit (the kubelet's --pod-max-pids "
		    "applies): command_executor.docker.resources.pids_limit not applied");
	int r = deny_egress(p, err);
	if (r < 0)
		return r;
	json_t *spec = pod_spec(p);
	if (!spec)
		return cae_error_set(err, -ENOMEM, "out of memory");
	int warm = claim_warm(p, spec, err);
	if (warm != 0) {
		json_decref(spec);
		return warm < 0 ? warm : 0;
	}
	char name[160];
	pod_name(name, sizeof(name), p->task->uuid);
	int64_t t0 = cae__now_ms();
	r = cae_k8s_pod_create(ki->k, ki->ns, spec, NULL, err);
	json_decref(spec);
	if (r < 0)
		return cae_error_prefix(err, "create pod %s", name);
	int64_t t1 = cae__now_ms();
	if (kp->helper) {
		r = cae_k8s_pod_wait(ki->k, ki->ns, name, init_running, NULL, POD_START_TIMEOUT_MS,
				     NULL, err);
		if (r == 0)
			r = deliver_helper(p, name, err);
		if (r < 0)
			return r;
	}
	r = cae_k8s_pod_wait(ki->k, ki->ns, name, cae_k8s_pod_running, NULL, POD_START_TIMEOUT_MS,
			     NULL, err);
	if (r < 0)
		return cae_error_prefix(err, "pod %s", name);
	int64_t t2 = cae__now_ms();
	p->create_fields =
	    json_pack("{s:s, s:s, s:s, s:b, s:I, s:I}", "pod", name, "namespace", ki->ns, "image",
		      kp->image, "helper", kp->helper != NULL, "create_ms", (json_int_t)(t1 - t0),
		      "start_ms", (json_int_t)(t2 - t1));
	kp->pc = (struct prep_ctx){.b = p->b, .uuid = p->task->uuid, .cancel_fd = p->cancel_fd};
	p->exec = prep_exec;
	p->exec_ctx = &kp->pc;
	p->project = PROJECT;
	return 0;
}

/* Step 4: the scratch directory, then the clone (over the network: a repository on this
 * host cannot reach a pod). */
static int k8s_populate(cae_prepare *p, cae_error *err)
{
	struct k8s_prep *kp = prep_of(p);
	const char *mk[] = {"mkdir", "-p", SCRATCH, NULL};
	cae_exec_request req = {.argv = mk, .cwd = WORKSPACE, .timeout_ms = 60000, .cancel_fd = -1};
	cae_run_result res;
	int r = prep_exec(&kp->pc, &req, &res, err);
	if (r < 0)
		return r;
	bool ok = res.exit_code == 0;
	cae_run_result_clear(&res);
	if (!ok)
		return cae_error_set(err, -EIO, "cannot make %s", SCRATCH);
	if (p->task->repo && !strstr(p->task->repo, "://") &&
	    !(strchr(p->task->repo, '@') && strchr(p->task->repo, ':')))
		return cae_error_set(err, -EOPNOTSUPP,
				     "the kubernetes backend clones over the network only: a "
				     "repository on this host (%s) cannot reach a pod",
				     p->task->repo);
	r = cae__git_clone(prep_exec, &kp->pc, p->b->cfg, p->b->log, p->task, PROJECT, err);
	if (r == 0) {
		cae__pkgcache_pod_fill(p);  /* the shared caches' fills (pkgcache-serve.c) */
		cae__pkgcache_maven_pod(p); /* Maven's settings and fill (pkgcache-maven.c) */
		cae__pkgcache_go_pod(p);    /* Go's build cache (pkgcache-go-kubernetes.c) */
		cae__pkgcache_npm_k8s(p);   /* the shared node_modules tree, or its store after
					       npm ci (pkgcache-npm-kubernetes.c) */
	}
	return r;
}

/* ---- protected paths (command_executor.protected_paths) ----
 *
 * Commands run as 1000 with no capabilities and the helper is PID 1: nothing in the main
 * container can give a path to root, and the pod API has no root exec. So a pod that
 * protects paths has one more container, PROTECT (protect_container): root with CAP_CHOWN
 * only, sharing nothing but the workspace. At the ready step (after clone and dependencies,
 * before any agent command), the user's pass in the main container makes a missing path
 * under .git an empty directory, skips one with a symbolic link on the way and gives the
 * project safe.directory (git refuses a repository of another owner otherwise); then one
 * exec into the sidecar makes each path and everything under it root's without following a
 * link (chown -R -h), takes away group and other write and the set-id bits, and makes every
 * directory on the way from /workspace down root's with mode 1777: writable, but sticky,
 * so that the user can neither rename nor remove .git, the project or the protected path,
 * nor put a writable one in its place. Then `kill 1` ends the sidecar and the ready step
 * waits until the API says it terminated: no root process stays in the pod. The pod's phase
 * stays Running while the main container runs, so liveness reads it as before. */

/* $@: the protected paths. The user's pass (CAE_PROTECT_USER_PASS) names the paths it
 * keeps on stdout (one a line, normalised). */
static const char protect_user_script[] =
    "set -euf\n"
    "cd " PROJECT "\n" CAE_PROTECT_USER_PASS(PROJECT, "printf '%s\\n' \"$q\"", "");

/* $@: the paths the user's pass kept. As root in the sidecar: each is looked at again (no
 * symbolic link on the way, it exists), then the directories on the way, top down, become
 * root's with mode 1777, and the path and all under it root's, without group or other
 * write or set-id bits. chown -R -h and chmod -R never follow a link inside the tree. */
static const char protect_root_script[] =
    "set -euf\n"
    "for d in " WORKSPACE " " PROJECT "; do\n"
    "  [ -d \"$d\" ] && [ ! -L \"$d\" ] || { echo \"$d: not a directory\" >&2; exit 4; }\n"
    "  chown -h 0:0 \"$d\" && chmod 1777 \"$d\"\n"
    "done\n"
    "cd " PROJECT "\n"
    "for p in \"$@\"; do\n"
    "  ok=1 q=\n"
    "  old=$IFS; IFS=/\n"
    "  for c in $p; do\n"
    "    q=${q:+$q/}$c\n"
    "    if [ -L \"$q\" ]; then ok=0; fi\n"
    "  done\n"
    "  IFS=$old\n"
    "  [ $ok = 1 ] && [ -e \"$q\" ] || continue\n"
    "  a=\n"
    "  old=$IFS; IFS=/\n"
    "  for c in ${q%/*}; do\n"
    "    [ \"$c\" != \"$q\" ] || break\n"
    "    a=${a:+$a/}$c\n"
    "    chown -h 0:0 \"$a\" && chmod 1777 \"$a\"\n"
    "  done\n"
    "  IFS=$old\n"
    "  chown -R -h 0:0 -- \"$q\"\n"
    "  chmod -R go-w,ug-s -- \"$q\"\n"
    "  printf '%s\\n' \"$q\"\n"
    "done\n";

/* The sidecar has terminated (or the pod stopped running: the caller fails then). */
static int protect_gone(json_t *pod, void *ud, cae_error *err)
{
	(void)ud;
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(json_object_get(pod, "status"), "containerStatuses"), i,
			   c)
	{
		const char *n = json_string_value(json_object_get(c, "name"));
		if (n && strcmp(n, PROTECT) == 0)
			return json_object_get(json_object_get(c, "state"), "terminated") ? 1 : 0;
	}
	int r = cae_k8s_pod_running(pod, NULL, err);
	return r < 0 ? r : 0;
}

/* The outcome of one pass of protect_paths (r from its exec, res its result): 0, or its
 * error, said as what when the pass ran and failed (res is cleared then). */
static int pass_outcome(int r, cae_run_result *res, const char *what, cae_error *err)
{
	if (r < 0)
		return cae_error_prefix(err, "protected paths");
	if (res->exit_code == 0 && !res->timed_out && !res->cancelled)
		return 0;
	r = cae_error_set(err, res->cancelled ? -ECANCELED : -EIO, "protected paths: %s: %s", what,
			  res->err ? res->err : "");
	cae_run_result_clear(res);
	return r;
}

static int protect_paths(cae_prepare *p, const char *pod, cae_error *err)
{
	struct k8s_prep *kp = prep_of(p);
	struct k8s_impl *ki = impl_of(p->b);
	const cae_config_strlist *pp = &p->b->cfg->command_executor.protected_paths;
	if (!kp->protect)
		return 0;
	/* sh -c SCRIPT cae-protect PATHS...: the user's pass, then the root pass */
	_cleanup_free_ const char **argv = calloc(pp->n + 5, sizeof(char *));
	if (!argv)
		return cae_error_set(err, -ENOMEM, "out of memory");
	size_t k = 0;
	argv[k++] = "sh";
	argv[k++] = "-c";
	argv[k++] = protect_user_script;
	argv[k++] = "cae-protect";
	for (size_t i = 0; i < pp->n; i++)
		argv[k++] = pp->items[i];
	cae_exec_request req = {.argv = argv,
				.cwd = PROJECT,
				.timeout_ms = 120 * 1000,
				.max_stdout = 64 * 1024,
				.max_stderr = 64 * 1024,
				.cancel_fd = -1};
	cae_run_result res;
	int r =
	    pass_outcome(prep_exec(&kp->pc, &req, &res, err), &res, "the user's pass failed", err);
	if (r < 0)
		return r;
	/* the kept paths, one a line, as the root pass's arguments */
	_cleanup_free_ char *kept = res.out ? TAKE_PTR(res.out) : strdup("");
	cae_run_result_clear(&res);
	if (!kept)
		return cae_error_set(err, -ENOMEM, "out of memory");
	argv[2] = protect_root_script;
	k = 4;
	for (char *l = kept, *e; *l && k < pp->n + 4; l = e + 1) {
		e = strchr(l, '\n');
		if (!e)
			break;
		*e = '\0';
		argv[k++] = l;
	}
	argv[k] = NULL;
	r = pass_outcome(cae_k8s_exec(ki->k, ki->ns, pod, PROTECT, argv, NULL, 0, 120 * 1000,
				      64 * 1024, 64 * 1024, p->cancel_fd, &res, err),
			 &res, "cannot make them read-only to commands", err);
	if (r < 0)
		return r;
	cae_run_result_clear(&res);
	/* the end of the sidecar: its exec may lose its status as the container goes, so
	 * what counts is the API's word that it terminated */
	const char *kill1[] = {"kill", "-TERM", "1", NULL};
	cae_error e = {0};
	if (cae_k8s_exec(ki->k, ki->ns, pod, PROTECT, kill1, NULL, 0, 30 * 1000, 0, 0, -1, &res,
			 &e) == 0)
		cae_run_result_clear(&res);
	r = cae_k8s_pod_wait(ki->k, ki->ns, pod, protect_gone, NULL, 60 * 1000, NULL, err);
	return r < 0 ? cae_error_prefix(err, "protected paths: the root sidecar did not end") : 0;
}

static int k8s_ready(cae_prepare *p, cae_env_info *info, cae_error *err)
{
	struct k8s_impl *ki = impl_of(p->b);
	char name[160];
	name_of(p->b, p->task->uuid, name, sizeof(name));
	int pr = protect_paths(p, name, err);
	if (pr < 0)
		return pr;
	_cleanup_free_ char *wtext = json_dumps(p->warnings, JSON_COMPACT);
	json_t *patch = json_pack("{s:{s:{s:s}, s:{s:s}}}", "metadata", "labels", L_PHASE, "ready",
				  "annotations", A_WARNINGS, wtext ? wtext : "[]");
	json_t *pod = NULL;
	_cleanup_free_ char *path = NULL;
	if (asprintf(&path, "/api/v1/namespaces/%s/pods/%s", ki->ns, name) < 0)
		path = NULL;
	int r = !patch || !path ? cae_error_set(err, -ENOMEM, "out of memory")
				: cae_k8s_call(ki->k, "PATCH", path, patch, &pod, err);
	json_decref(patch);
	if (r < 0)
		return r;
	r = cae__env_ready_info(
	    p, json_string_value(json_object_get(json_object_get(pod, "metadata"), "uid")), info,
	    err);
	json_decref(pod);
	return r;
}

static void k8s_release(cae_prepare *p)
{
	struct k8s_prep *kp = prep_of(p);
	if (kp) {
		free(kp->helper);
		free(kp->git_credential);
		free(kp);
		p->state = NULL;
	}
}

/* ---- info, list, stale GC ---- */

static int k8s_info(cae_backend *b, const char *uuid, cae_env_info *info, cae_error *err)
{
	json_t *pod = NULL;
	cae_error e = {0};
	int r = get_pod(b, uuid, &pod, &e);
	if (r == -ENOENT)
		return cae_error_set(err, -ENOENT, "no environment for task %s", uuid);
	if (r < 0)
		return cae_error_set(err, r, "%s", e.message);
	r = cae__env_info(b, &envs_ops, pod, info, err);
	json_decref(pod);
	return r;
}

/* The pods labelled as a task's (cae_envs_ops.list). */
static int list_pods(cae_backend *b, json_t **out, cae_error *err)
{
	return cae_k8s_pod_list(impl_of(b)->k, impl_of(b)->ns, L_TASK, out, err);
}

/* A finished pod that can run no command any more: it stopped (cae_envs_ops.gone). */
static bool pod_stopped(cae_backend *b, json_t *pod, bool old)
{
	(void)b;
	(void)old;
	return pod_ended(pod);
}

/* The gc's removal (cae_envs_ops.remove): this process's channel to the pod goes too. */
static int remove_stale(cae_backend *b, const char *uuid, cae_error *err)
{
	cae__chan_forget(&impl_of(b)->chans, uuid);
	int r = remove_pod(b, uuid, err);
	if (r == 0)
		cae__snapshot_k8s_drop(b, uuid);
	return r;
}

/* ---- resources ----
 * What a running pod uses, from its main container's cgroup as the container sees it
 * (/sys/fs/cgroup: v1 or v2), read by one exec of a shell that uses builtins only, so that
 * it adds one process (itself) and no more. Chosen over the kubelet's summary
 * (nodes/proxy/stats/summary): that needs a cluster-wide permission the backend otherwise
 * never does, has no process count per container and lags by the kubelet's housekeeping
 * period; the cgroup is current, exact and reached with the pod exec the backend has. */
static const char stats_script[] =
    "cd /sys/fs/cgroup || exit 3\n"
    "v() { [ -r \"$2\" ] && read -r l < \"$2\" && echo \"$1 $l\"; }\n"
    "k() { [ -r \"$3\" ] && while read -r a n; do [ \"$a\" = \"$2\" ] && echo \"$1 $n\"; "
    "done < \"$3\"; }\n"
    "if [ -e cgroup.controllers ]; then\n"
    "  k cpu_us usage_usec cpu.stat; v mem memory.current; v mem_max memory.max\n"
    "  k inactive inactive_file memory.stat; v pids pids.current; v pids_max pids.max\n"
    "  v cpu_max cpu.max\n"
    "else\n"
    "  v cpu_ns cpuacct/cpuacct.usage; v mem memory/memory.usage_in_bytes\n"
    "  v mem_max memory/memory.limit_in_bytes\n"
    "  k inactive total_inactive_file memory/memory.stat\n"
    "  v pids pids/pids.current; v pids_max pids/pids.max\n"
    "  v quota cpu/cpu.cfs_quota_us; v period cpu/cpu.cfs_period_us\n"
    "fi\n"
    "exit 0\n";

/* The value of "key N" in text (-1 when absent or not a number); key "cpu_max" has two. */
static long long stat_value(const char *text, const char *key, long long *second)
{
	size_t n = strlen(key);
	for (const char *l = text, *nl; *l; l = nl ? nl + 1 : l + strlen(l)) {
		nl = strchr(l, '\n');
		if (strncmp(l, key, n) != 0 || l[n] != ' ')
			continue;
		long long v = -1, w = -1;
		int got = sscanf(l + n + 1, "%lld %lld", &v, &w);
		if (second)
			*second = got == 2 ? w : -1;
		return got >= 1 ? v : -1;
	}
	return -1;
}

/* {cpu_seconds, memory_bytes, memory_limit_bytes, pids, cpus_limit, pids_limit} of a
 * running pod (cae_docker_stats_summary's shape), or NULL. */
static json_t *resources_of(cae_backend *b, const char *name)
{
	struct k8s_impl *ki = impl_of(b);
	const char *argv[] = {"sh", "-c", stats_script, NULL};
	cae_run_result res;
	cae_error e = {0};
	if (cae_k8s_exec(ki->k, ki->ns, name, MAIN, argv, NULL, 0, STATS_TIMEOUT_MS, 4096, 4096, -1,
			 &res, &e) < 0)
		return NULL;
	json_t *out = NULL;
	const char *t = res.out ? res.out : "";
	long long cpu_ns = stat_value(t, "cpu_ns", NULL), cpu_us = stat_value(t, "cpu_us", NULL);
	long long mem = stat_value(t, "mem", NULL), inactive = stat_value(t, "inactive", NULL);
	long long pids = stat_value(t, "pids", NULL), mem_max = stat_value(t, "mem_max", NULL);
	long long period = -1, quota = stat_value(t, "cpu_max", &period);
	if (quota < 0) {
		quota = stat_value(t, "quota", NULL);
		period = stat_value(t, "period", NULL);
	}
	if (res.exit_code == 0 && mem >= 0 && pids >= 1 && (cpu_ns >= 0 || cpu_us >= 0)) {
		/* not counted: the reading shell (pids) and the page cache (memory), as docker */
		out = json_pack("{s:f, s:I, s:I}", "cpu_seconds",
				cpu_ns >= 0 ? (double)cpu_ns / 1e9 : (double)cpu_us / 1e6,
				"memory_bytes", (json_int_t)(mem > inactive ? mem - inactive : mem),
				"pids", (json_int_t)(pids - 1));
		/* v1 says "no limit" with a huge number, v2 with "max" (no number) */
		if (out && mem_max > 0 && mem_max < (1LL << 62))
			json_object_set_new(out, "memory_limit_bytes", json_integer(mem_max));
		if (out && quota > 0 && period > 0)
			json_object_set_new(out, "cpus_limit", json_real((double)quota / period));
		long long pmax = stat_value(t, "pids_max", NULL);
		if (out && pmax > 0)
			json_object_set_new(out, "pids_limit", json_integer(pmax));
	}
	cae_run_result_clear(&res);
	return out;
}

/* A running pod's entry of the list gets its resources (cae_envs_ops.extra). */
static void add_resources(cae_backend *b, json_t *pod, json_t *entry)
{
	const char *st = json_string_value(json_object_get(entry, "status"));
	const char *name =
	    json_string_value(json_object_get(json_object_get(pod, "metadata"), "name"));
	json_t *res = st && strcmp(st, "ready") == 0 && name ? resources_of(b, name) : NULL;
	if (res)
		json_object_set_new(entry, "resources", res);
}

static const cae_envs_ops envs_ops = {
    .list = list_pods,
    .record = pod_record,
    .extra = add_resources,
    .gone = pod_stopped,
    .remove = remove_stale,
    .project = PROJECT,
    .what = "pod",
};

static int k8s_list(cae_backend *b, json_t **out, cae_error *err)
{
	return cae__envs_list(b, &envs_ops, out, err);
}

static int k8s_cleanup_stale(cae_backend *b, int64_t threshold_s, cae_env_filter_fn filter,
			     void *filter_ud, int *removed, cae_error *err)
{
	int r = cae__envs_cleanup_stale(b, &envs_ops, threshold_s, filter, filter_ud, removed, err);
	if (b->cfg->command_executor.state_dir)
		(void)cae__snapshot_sweep(b, NULL); /* killed snapshots' and forks' leftovers */
	return r;
}

static void k8s_free(cae_backend *b)
{
	struct k8s_impl *ki = b ? impl_of(b) : NULL;
	if (ki) {
		cae__chan_table_fini(&ki->chans);
		pthread_mutex_destroy(&ki->mu);
		json_decref(ki->claimed);
		cae_k8s_free(ki->k);
		free(ki->ns);
		free(ki);
	}
	free(b);
}

static json_t *k8s_network_denied(cae_backend *b, const char *uuid)
{
	return cae__chan_network_denied(&impl_of(b)->chans, uuid);
}

static int k8s_port_forward(cae_backend *b, const char *uuid, int port, int *host_port,
			    cae_error *err)
{
	return cae__chan_port_forward(&impl_of(b)->chans, uuid, port, host_port, err);
}

static const cae_backend_ops k8s_ops = {
    .name = "kubernetes",
    .validate = k8s_validate,
    .remove = k8s_remove,
    .create = k8s_create,
    .populate = k8s_populate,
    .ready = k8s_ready,
    .release = k8s_release,
    .exec = k8s_exec,
    .edit = k8s_edit,
    .fs = k8s_fs,
    .network_denied = k8s_network_denied,
    .port_forward = k8s_port_forward,
    .cleanup_stale = k8s_cleanup_stale,
    .list = k8s_list,
    .info = k8s_info,
    .free = k8s_free,
};

int cae__kubernetes_backend_new(const cae_config *cfg, cae_log *log, cae_backend **out,
				cae_error *err)
{
	cae_backend *b = calloc(1, sizeof(*b));
	struct k8s_impl *ki = calloc(1, sizeof(*ki));
	if (!b || !ki) {
		free(b);
		free(ki);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	cae__chan_table_init(&ki->chans, b, &chan_ops);
	pthread_mutex_init(&ki->mu, NULL);
	ki->claimed = json_object();
	b->ops = &k8s_ops;
	b->cfg = cfg;
	b->log = log;
	b->impl = ki;
	const __typeof__(cfg->command_executor.kubernetes) *kc = &cfg->command_executor.kubernetes;
	cae_k8s_auth auth;
	int r = cae_k8s_auth_load(kc->kubeconfig, kc->context, &auth, err);
	if (r == 0)
		r = cae_k8s_new(&auth, &ki->k, err);
	cae_k8s_auth_clear(&auth);
	if (r < 0) {
		cae_error_prefix(err, "kubernetes backend");
		k8s_free(b);
		return r;
	}
	const char *ns = kc->namespace		    ? kc->namespace
			 : cae_k8s_namespace(ki->k) ? cae_k8s_namespace(ki->k)
						    : "default";
	ki->ns = strdup(ns);
	json_t *nsobj = NULL;
	_cleanup_free_ char *path = NULL;
	if (!ki->ns || asprintf(&path, "/api/v1/namespaces/%s/pods?limit=1", ki->ns) < 0) {
		k8s_free(b);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	/* the API answers and lets us see pods here */
	r = cae_k8s_call(ki->k, "GET", path, NULL, &nsobj, err);
	json_decref(nsobj);
	if (r < 0) {
		cae_error_prefix(err, "kubernetes backend");
		k8s_free(b);
		return r;
	}
	cae_log_fields(
	    log, CAE_LOG_INFO, "kubernetes.connected",
	    json_pack("{s:s, s:s}", "server", cae_k8s_server(ki->k), "namespace", ki->ns), NULL);
	*out = b;
	return 0;
}

bool cae__kubernetes_backend_configured(const cae_config *cfg)
{
	return cfg->command_executor.kubernetes.namespace ||
	       cfg->command_executor.kubernetes.kubeconfig;
}

/* ---- what the warm pool (src/backend/pool-kubernetes.c) borrows ---- */

cae_k8s *cae__k8s_client(cae_backend *b, const char **ns)
{
	*ns = impl_of(b)->ns;
	return impl_of(b)->k;
}

int cae__k8s_pool_spec(cae_backend *b, const char *environment, json_t **pod,
		       char key[CAE_POOL_KEY_MAX], char **helper, cae_error *err)
{
	cae_backend quiet;
	cae_task task;
	cae_prepare p;
	*pod = NULL;
	*helper = NULL;
	int r = cae__pool_prepare_init(&p, &quiet, b, &task, environment, err);
	if (r == 0)
		r = k8s_validate(&p, err);
	if (r == 0 && !(*pod = pod_spec(&p)))
		r = cae_error_set(err, -ENOMEM, "out of memory");
	if (r == 0) {
		if (cae__pool_key(b, json_object_get(*pod, "spec"), prep_of(&p)->helper, key) < 0)
			r = cae_error_set(err, -ENOMEM, "out of memory");
		/* what is the task's is not the pool's */
		json_t *md = json_object_get(*pod, "metadata");
		json_t *labels = json_object_get(md, "labels"),
		       *ann = json_object_get(md, "annotations");
		json_object_del(md, "name");
		json_object_del(labels, L_TASK);
		json_object_del(labels, L_UUID);
		json_object_del(labels, L_PHASE);
		json_object_del(labels, L_CREATED);
		json_object_del(labels, CAE_K8S_EGRESS_LABEL); /* the claim's patch sets it */
		json_object_del(ann, A_UUID);
		json_object_del(ann, A_CREATED);
		json_object_del(ann, A_WARNINGS);
		json_object_del(ann, A_PREPARER);
		json_object_del(ann, A_GIT_CREDENTIAL);
		*helper = TAKE_PTR(prep_of(&p)->helper);
	}
	k8s_release(&p);
	json_decref(p.warnings);
	json_decref(p.limits);
	return r;
}

int cae__k8s_pool_start(cae_backend *b, json_t *pod, const char *helper, int cancel_fd,
			cae_error *err)
{
	struct k8s_impl *ki = impl_of(b);
	const char *name =
	    json_string_value(json_object_get(json_object_get(pod, "metadata"), "name"));
	int r = cae_k8s_pod_create(ki->k, ki->ns, pod, NULL, err);
	if (r < 0)
		return cae_error_prefix(err, "create pod %s", name);
	struct k8s_prep kp = {.helper = (char *)helper};
	cae_prepare p = {.b = b, .cancel_fd = cancel_fd, .state = &kp};
	if (helper) {
		r = cae_k8s_pod_wait(ki->k, ki->ns, name, init_running, NULL, POD_START_TIMEOUT_MS,
				     NULL, err);
		if (r == 0)
			r = deliver_helper(&p, name, err);
	}
	if (r == 0)
		r = cae_k8s_pod_wait(ki->k, ki->ns, name, cae_k8s_pod_running, NULL,
				     POD_START_TIMEOUT_MS, NULL, err);
	if (r < 0) {
		cae_error_prefix(err, "pod %s", name);
		(void)cae_k8s_pod_delete(ki->k, ki->ns, name, 0, NULL);
	}
	return r;
}

/* ---- what the snapshots (src/backend/snapshot-kubernetes.c) borrow ---- */

void cae__k8s_pod_name(char *buf, size_t size, const char *uuid)
{
	pod_name(buf, size, uuid);
}

int cae__k8s_get_pod(cae_backend *b, const char *uuid, json_t **pod, cae_error *err)
{
	return get_pod(b, uuid, pod, err);
}

int cae__k8s_env_pod(cae_backend *b, const char *uuid, json_t **pod, cae_error *err)
{
	int r = usable(b, uuid, false, pod, err);
	if (r == 0 && !cae__backend_own(b, meta(*pod, "labels", CAE_LABEL_INSTANCE))) {
		json_decref(*pod);
		*pod = NULL;
		return cae_error_set(err, -ENOENT, "no environment for task %s", uuid);
	}
	return r;
}

void cae__k8s_forget(cae_backend *b, const char *uuid)
{
	cae__chan_forget(&impl_of(b)->chans, uuid);
}

int cae__k8s_protect(cae_backend *b, const char *uuid, const char *pod, cae_error *err)
{
	struct k8s_prep kp = {.protect = true, .pc = {.b = b, .uuid = uuid, .cancel_fd = -1}};
	cae_prepare p = {.b = b, .cancel_fd = -1, .state = &kp};
	return protect_paths(&p, pod, err);
}
