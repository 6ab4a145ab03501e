/* Tasks and ContainerInfo: parsing and JSON. */
#include "cae/backend.h"

#include "base/macro.h"
#include "cae/config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/banned.h"

bool cae_task_uuid_valid(const char *u)
{
	if (!u || !*u || strlen(u) > 64 || u[0] == '.' || u[0] == '-')
		return false;
	for (const char *p = u; *p; p++) {
		char c = *p;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.'))
			return false;
	}
	return true;
}

static int get_str(json_t *j, const char *key, char **out, bool required, cae_error *err)
{
	json_t *v = json_object_get(j, key);
	if (!v || json_is_null(v)) {
		if (required)
			return cae_error_set(err, -EINVAL, "task: missing \"%s\"", key);
		return 0;
	}
	if (!json_is_string(v))
		return cae_error_set(err, -EINVAL, "task: \"%s\" must be a string", key);
	if (json_string_length(v) == 0) {
		if (required)
			return cae_error_set(err, -EINVAL, "task: \"%s\" is empty", key);
		return 0;
	}
	*out = strdup(json_string_value(v));
	return *out ? 0 : -ENOMEM;
}

int cae_task_from_json(json_t *j, cae_task *t, cae_error *err)
{
	memset(t, 0, sizeof(*t));
	if (!json_is_object(j))
		return cae_error_set(err, -EINVAL, "task: expected a JSON object");
	int r;
	if ((r = get_str(j, "uuid", &t->uuid, true, err)) < 0 ||
	    (r = get_str(j, "repo", &t->repo, false, err)) < 0 ||
	    (r = get_str(j, "platform", &t->platform, false, err)) < 0 ||
	    (r = get_str(j, "owner", &t->owner, false, err)) < 0 ||
	    (r = get_str(j, "name", &t->name, false, err)) < 0 ||
	    (r = get_str(j, "branch", &t->branch, false, err)) < 0 ||
	    (r = get_str(j, "target_branch", &t->target_branch, false, err)) < 0)
		goto fail;
	if (!cae_task_uuid_valid(t->uuid)) {
		r = cae_error_set(
		    err, -EINVAL,
		    "task: invalid uuid \"%s\" (1-64 of letters, digits, '-', '_', '.')", t->uuid);
		goto fail;
	}
	json_t *kind = json_object_get(j, "kind");
	if (kind && !json_is_null(kind)) {
		const char *k = json_string_value(kind);
		if (k && strcmp(k, "issue") == 0)
			t->kind = CAE_TASK_ISSUE;
		else if (k && (strcmp(k, "pull_request") == 0 || strcmp(k, "merge_request") == 0))
			t->kind = CAE_TASK_PULL_REQUEST;
		else {
			r = cae_error_set(err, -EINVAL,
					  "task: \"kind\" must be \"issue\" or \"pull_request\"");
			goto fail;
		}
	}
	if (t->platform && strcmp(t->platform, "github") != 0 &&
	    strcmp(t->platform, "gitlab") != 0) {
		r = cae_error_set(err, -EINVAL,
				  "task: \"platform\" must be \"github\" or \"gitlab\"");
		goto fail;
	}
	/* "owner/name" as repo with a platform and no URL scheme. */
	if (t->repo && t->platform && !t->owner && !strstr(t->repo, "://") && t->repo[0] != '/' &&
	    t->repo[0] != '.') {
		char *slash = strrchr(t->repo, '/');
		if (slash) {
			t->owner = strndup(t->repo, (size_t)(slash - t->repo));
			t->name = strdup(slash + 1);
			free(t->repo);
			t->repo = NULL;
		}
	}
	if (!t->repo && !(t->platform && t->owner && t->name)) {
		r = cae_error_set(err, -EINVAL,
				  "task: give \"repo\" (a URL or a local path) or \"platform\", "
				  "\"owner\" and \"name\"");
		goto fail;
	}
	if (t->kind == CAE_TASK_PULL_REQUEST && !t->branch) {
		r = cae_error_set(err, -EINVAL,
				  "task: a pull_request needs \"branch\" (its source branch)");
		goto fail;
	}
	return 0;
fail:
	cae_task_clear(t);
	return r;
}

json_t *cae_task_to_json(const cae_task *t)
{
	json_t *j = json_object();
	json_object_set_new(j, "uuid", json_string(t->uuid));
	if (t->repo)
		json_object_set_new(j, "repo", json_string(t->repo));
	if (t->platform)
		json_object_set_new(j, "platform", json_string(t->platform));
	if (t->owner)
		json_object_set_new(j, "owner", json_string(t->owner));
	if (t->name)
		json_object_set_new(j, "name", json_string(t->name));
	json_object_set_new(
	    j, "kind", json_string(t->kind == CAE_TASK_PULL_REQUEST ? "pull_request" : "issue"));
	if (t->branch)
		json_object_set_new(j, "branch", json_string(t->branch));
	if (t->target_branch)
		json_object_set_new(j, "target_branch", json_string(t->target_branch));
	return j;
}

void cae_task_clear(cae_task *t)
{
	if (!t)
		return;
	free(t->uuid);
	free(t->repo);
	free(t->platform);
	free(t->owner);
	free(t->name);
	free(t->branch);
	free(t->target_branch);
	memset(t, 0, sizeof(*t));
}

static void set_opt(json_t *j, const char *k, const char *v)
{
	json_object_set_new(j, k, v ? json_string(v) : json_null());
}

json_t *cae_env_info_to_json(const cae_env_info *i)
{
	json_t *j = json_object();
	set_opt(j, "container_id", i->container_id);
	set_opt(j, "task_uuid", i->task_uuid);
	set_opt(j, "environment_name", i->environment_name);
	set_opt(j, "workspace_path", i->workspace_path);
	set_opt(j, "created_at", i->created_at);
	set_opt(j, "status", i->status);
	set_opt(j, "backend", i->backend);
	if (i->sandbox)
		set_opt(j, "sandbox", i->sandbox);
	if (i->host_path)
		set_opt(j, "host_path", i->host_path);
	json_object_set_new(j, "warnings",
			    i->warnings ? json_deep_copy(i->warnings) : json_array());
	json_object_set_new(j, "deps", i->deps ? json_deep_copy(i->deps) : json_array());
	if (i->limits)
		json_object_set_new(j, "limits", json_deep_copy(i->limits));
	if (i->instance)
		set_opt(j, "instance", i->instance);
	if (i->network)
		json_object_set_new(j, "network", json_deep_copy(i->network));
	return j;
}

static char *dup_field(json_t *j, const char *k)
{
	const char *s = json_string_value(json_object_get(j, k));
	return s ? strdup(s) : NULL;
}

int cae_env_info_from_json(json_t *j, cae_env_info *i, cae_error *err)
{
	memset(i, 0, sizeof(*i));
	if (!json_is_object(j))
		return cae_error_set(err, -EINVAL, "environment metadata: expected an object");
	i->container_id = dup_field(j, "container_id");
	i->task_uuid = dup_field(j, "task_uuid");
	i->environment_name = dup_field(j, "environment_name");
	i->workspace_path = dup_field(j, "workspace_path");
	i->host_path = dup_field(j, "host_path");
	i->created_at = dup_field(j, "created_at");
	i->status = dup_field(j, "status");
	i->backend = dup_field(j, "backend");
	i->sandbox = dup_field(j, "sandbox");
	i->instance = dup_field(j, "instance");
	json_t *w = json_object_get(j, "warnings");
	i->warnings = json_is_array(w) ? json_deep_copy(w) : json_array();
	json_t *d = json_object_get(j, "deps");
	i->deps = json_is_array(d) ? json_deep_copy(d) : json_array();
	json_t *l = json_object_get(j, "limits");
	i->limits = json_is_object(l) ? json_deep_copy(l) : NULL;
	json_t *nw = json_object_get(j, "network");
	i->network = json_is_object(nw) ? json_deep_copy(nw) : NULL;
	if (!i->task_uuid || !i->workspace_path) {
		cae_env_info_clear(i);
		return cae_error_set(err, -EINVAL, "environment metadata: missing fields");
	}
	return 0;
}

void cae_env_info_clear(cae_env_info *i)
{
	if (!i)
		return;
	free(i->container_id);
	free(i->task_uuid);
	free(i->environment_name);
	free(i->workspace_path);
	free(i->host_path);
	free(i->created_at);
	free(i->status);
	free(i->backend);
	free(i->sandbox);
	free(i->instance);
	json_decref(i->warnings);
	json_decref(i->deps);
	json_decref(i->limits);
	json_decref(i->network);
	memset(i, 0, sizeof(*i));
}

/* ---- repositories named by the model (host paths are the operator's) ---- */

static bool scheme_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '+' || c == '-' || c == '.';
}

/* Length of a URL scheme or remote-helper name before `sep` at the start of s, else 0. */
static size_t prefix_before(const char *s, const char *sep)
{
	size_t n = 0;
	while (scheme_char(s[n]))
		n++;
	return n > 0 && strncmp(s + n, sep, strlen(sep)) == 0 ? n : 0;
}

enum repo_kind { REPO_REMOTE, REPO_LOCAL, REPO_HELPER, REPO_BAD_SCHEME };

/* What git (and the backends: cae__git_clone_source, the docker backend's bundling) make
 * of repo. *path: for REPO_LOCAL, the path part (borrowed from repo). */
static enum repo_kind repo_kind(const char *repo, const char **path)
{
	static const char *const remote[] = {"https", "http", "git", "ssh", "git+ssh", "ssh+git"};
	*path = repo;
	size_t n = prefix_before(repo, "::");
	if (n > 0)
		return REPO_HELPER; /* <transport>::<address>: git runs git-remote-<transport> */
	n = prefix_before(repo, "://");
	if (n > 0) {
		for (size_t i = 0; i < sizeof(remote) / sizeof(remote[0]); i++)
			if (strlen(remote[i]) == n && strncasecmp(repo, remote[i], n) == 0)
				return REPO_REMOTE;
		if (n == 4 && strncasecmp(repo, "file", 4) == 0) {
			*path = repo + 7;
			return REPO_LOCAL;
		}
		return REPO_BAD_SCHEME;
	}
	if (strstr(repo, "://"))
		return REPO_BAD_SCHEME;
	/* scp-like [user@]host:path: a ':' before any '/' (git's own rule), with the '@' the
	 * backends look for. Anything else is a path on this host. */
	size_t first = strcspn(repo, ":/");
	if (repo[first] == ':' && first > 0 && repo[0] != '-' && strchr(repo, '@') &&
	    strchr(repo, '@') < repo + first)
		return REPO_REMOTE;
	return REPO_LOCAL;
}

static bool under(const char *real, const char *root)
{
	size_t n = strlen(root);
	if (n == 1 && root[0] == '/')
		return true;
	return strncmp(real, root, n) == 0 && (real[n] == '\0' || real[n] == '/');
}

int cae_task_check_model_repo(const cae_config *cfg, cae_task *t, cae_error *err)
{
	if (!t->repo)
		return 0; /* platform, owner and name: a URL cae builds */
	const char *path;
	switch (repo_kind(t->repo, &path)) {
	case REPO_REMOTE:
		return 0;
	case REPO_HELPER:
		return cae_error_set(err, -EINVAL,
				     "repository \"%s\": remote-helper transports (<transport>::) "
				     "are not accepted",
				     t->repo);
	case REPO_BAD_SCHEME:
		return cae_error_set(err, -EINVAL,
				     "repository \"%s\": only https, http, git and ssh URLs (or "
				     "user@host:path) are accepted",
				     t->repo);
	case REPO_LOCAL:
		break;
	}
	const cae_config_strlist *roots = &cfg->command_executor.local_repo_roots;
	char real[PATH_MAX];
	/* The same answer whether the path exists or not: no probing of the host. A file://
	 * URL names a host path only as file:///path. */
	bool usable = *path && (path == t->repo || path[0] == '/');
	if (usable && realpath(path, real)) {
		for (size_t i = 0; i < roots->n; i++) {
			char rroot[PATH_MAX];
			if (!realpath(roots->items[i], rroot) || !under(real, rroot))
				continue;
			/* The backend clones what was checked, not a path that may change. */
			char *p = strdup(real);
			if (!p)
				return -ENOMEM;
			free(t->repo);
			t->repo = p;
			return 0;
		}
	}
	return cae_error_set(
	    err, -EPERM,
	    "repository \"%s\": a local path is accepted only under the directories "
	    "of command_executor.local_repo_roots%s; give a remote URL",
	    t->repo, roots->n ? "" : " (none configured)");
}
