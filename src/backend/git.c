/* Clone (the token reaches git only, never the clone), shared by every backend through its
 * exec callback. */
#include "backend/backend-internal.h"

#include "base/gitsafe.h"
#include "base/macro.h"
#include "cae/log.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/banned.h"

#define GIT_TIMEOUT_DEFAULT_S 300

static const char *const git_safe_argv[] = {CAE_GIT_ARGV};
_Static_assert(ARRAY_SIZE(git_safe_argv) == CAE_GIT_ARGC, "CAE_GIT_ARGC counts CAE_GIT_ARGV");

/* Fetches name the program that answers on the other side: never the repository's
 * remote.<name>.uploadpack (a command run on this side for a local repository). */
#define UPLOAD_PACK "--upload-pack=git-upload-pack"

static bool host_is(const char *url, const char *host)
{
	const char *p = strstr(url, "://");
	if (!p)
		return false;
	p += 3;
	const char *at = strchr(p, '@');
	const char *slash = strchr(p, '/');
	if (at && (!slash || at < slash))
		p = at + 1;
	size_t n = strlen(host);
	return strncmp(p, host, n) == 0 && (p[n] == '/' || p[n] == ':' || p[n] == '\0');
}

/* scheme://host[:port] of GITLAB_API_URL, new string. */
static char *url_origin(const char *url)
{
	const char *p = strstr(url, "://");
	if (!p)
		return NULL;
	const char *slash = strchr(p + 3, '/');
	return slash ? strndup(url, (size_t)(slash - url)) : strdup(url);
}

int cae__git_credential_target(const cae_config *cfg, const cae_task *task, char **host,
			       const char **user, const char **token, cae_error *err)
{
	*host = NULL;
	_cleanup_free_ char *url = NULL;
	int r = cae__git_clone_source(cfg, task, &url, token, user, err);
	if (r < 0 || !*token || !**token)
		return r;
	/* a repository on this host (a path, file://) is read from here: no push target */
	const char *p = strstr(url, "://");
	if (!p || strncmp(url, "file://", 7) == 0)
		return 0;
	p += 3;
	size_t n = strcspn(p, "/?#");
	const char *at = memchr(p, '@', n);
	if (at) {
		n -= (size_t)(at + 1 - p);
		p = at + 1;
	}
	*host = strndup(p, n);
	return *host ? 0 : -ENOMEM;
}

char *cae__git_credential_record(const cae_config *cfg, const cae_task *task)
{
	char *host = NULL, *rec = NULL;
	const char *user = NULL, *token = NULL;
	if (cae__git_credential_target(cfg, task, &host, &user, &token, NULL) == 0 && host) {
		const char *forge = token == cfg->github.token ? "github" : "gitlab";
		if (asprintf(&rec, "%s %s %s", host, user, forge) < 0)
			rec = NULL;
	}
	free(host);
	return rec;
}

char *cae__git_credential_answer(const cae_config *cfg, struct cae_log *log, const char *uuid,
				 const char *target, const char *request, size_t len)
{
	char want_host[256], user[64], forge[16];
	if (!target || sscanf(target, "%255s %63s %15s", want_host, user, forge) != 3)
		return NULL;
	char host[256] = "", protocol[16] = "";
	for (const char *p = request, *end = request + len; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		if (n > 5 && strncmp(p, "host=", 5) == 0 && n - 5 < sizeof(host))
			snprintf(host, sizeof(host), "%.*s", (int)(n - 5), p + 5);
		if (n > 9 && strncmp(p, "protocol=", 9) == 0 && n - 9 < sizeof(protocol))
			snprintf(protocol, sizeof(protocol), "%.*s", (int)(n - 9), p + 9);
		p += n + 1;
	}
	const char *token = strcmp(forge, "github") == 0 ? cfg->github.token : cfg->gitlab.token;
	bool grant = token && *token && strcmp(host, want_host) == 0 &&
		     (strcmp(protocol, "https") == 0 || strcmp(protocol, "http") == 0);
	cae_log_fields(
	    log, grant ? CAE_LOG_INFO : CAE_LOG_WARN, "git.credential",
	    json_pack("{s:s, s:s, s:b}", "task_uuid", uuid, "host", host, "granted", grant), NULL);
	char *reply = NULL;
	if (grant && asprintf(&reply, "username=%s\npassword=%s\n", user, token) < 0)
		reply = NULL;
	return reply;
}

static bool is_local_path(const char *repo)
{
	return !strstr(repo, "://") && !(strchr(repo, '@') && strchr(repo, ':'));
}

int cae__git_clone_source(const cae_config *cfg, const cae_task *task, char **url,
			  const char **token, const char **user, cae_error *err)
{
	*url = NULL;
	*token = NULL;
	*user = NULL;
	const char *platform = task->platform;
	if (!task->repo && (!task->owner || !task->name))
		return cae_error_set(err, -EINVAL, "the task names no repository");
	if (task->repo) {
		if (is_local_path(task->repo)) {
			char real[PATH_MAX];
			if (!realpath(task->repo, real))
				return cae_error_set(err, -ENOENT, "repository not found: %s",
						     task->repo);
			size_t n = strlen(real) + 8;
			*url = malloc(n);
			if (!*url)
				return -ENOMEM;
			snprintf(*url, n, "file://%s", real);
			return 0;
		}
		if (strchr(task->repo, '@') && strstr(task->repo, "://")) {
			/* Credentials in the task's URL would end up in .git/config and logs. */
			return cae_error_set(
			    err, -EINVAL,
			    "repository URL must not contain credentials; configure "
			    "a token instead");
		}
		*url = strdup(task->repo);
		if (!*url)
			return -ENOMEM;
		if (!platform) {
			if (host_is(task->repo, "github.com"))
				platform = "github";
			else if (cfg->gitlab.api_url) {
				_cleanup_free_ char *origin = url_origin(cfg->gitlab.api_url);
				const char *h = origin ? strstr(origin, "://") : NULL;
				if (h && host_is(task->repo, h + 3))
					platform = "gitlab";
			}
		}
	} else if (platform && strcmp(platform, "github") == 0) {
		size_t n = strlen(task->owner) + strlen(task->name) + 32;
		*url = malloc(n);
		if (!*url)
			return -ENOMEM;
		snprintf(*url, n, "https://github.com/%s/%s.git", task->owner, task->name);
	} else {
		/* GitLab: {protocol}://{host}/{path_with_namespace}.git with protocol and host
		 * taken from GITLAB_API_URL and path_with_namespace from the projects API. */
		const char *api =
		    cfg->gitlab.api_url ? cfg->gitlab.api_url : "https://gitlab.com/api/v4";
		_cleanup_free_ char *origin = url_origin(api);
		if (!origin)
			return cae_error_set(err, -EINVAL, "gitlab.api_url is not a URL");
		_cleanup_free_ char *path = NULL;
		int r = cae__gitlab_project_path(cfg, task->owner, task->name, &path, err);
		if (r < 0)
			return r;
		size_t n = strlen(origin) + strlen(path) + 16;
		*url = malloc(n);
		if (!*url)
			return -ENOMEM;
		snprintf(*url, n, "%s/%s.git", origin, path);
	}
	if (platform && strcmp(platform, "github") == 0 && cfg->github.token) {
		*token = cfg->github.token;
		*user = "x-access-token";
	} else if (platform && strcmp(platform, "gitlab") == 0 && cfg->gitlab.token) {
		*token = cfg->gitlab.token;
		*user = "oauth2";
	}
	return 0;
}

/* Answers git from the environment of its own process: the helper's text holds no secret. */
#define TOKEN_HELPER                                                                               \
	"credential.helper=!f() { test \"$1\" = get || exit 0; "                                   \
	"echo \"username=$CAE_GIT_USER\"; echo \"password=$CAE_GIT_TOKEN\"; }; f"

int cae__git_run(const cae_git_ctx *g, const char *cwd, const char *const *argv,
		 cae_run_result *res, cae_error *err)
{
	char tokvar[4096], uservar[256];
	const char *env[16];
	const char *args[CAE_GIT_ARGC + 32];
	size_t n = 0, k = 0;
	for (size_t i = 0; argv[i]; i++) {
		if (k + 3 >= ARRAY_SIZE(args))
			return cae_error_set(err, -E2BIG, "git: too many arguments");
		/* after the prefix's reset of credential.helper, ours as the only one: a -c
		 * setting is read after GIT_CONFIG_COUNT's, so it has to be one too */
		if (i == CAE_GIT_ARGC && g->token) {
			args[k++] = "-c";
			args[k++] = TOKEN_HELPER;
		}
		args[k++] = argv[i];
	}
	args[k] = NULL;
	env[n++] = "GIT_TERMINAL_PROMPT=0";
	env[n++] = "GIT_ASKPASS=";
	env[n++] = "SSH_ASKPASS=";
	/* set (even empty), it replaces core.gitProxy of every configuration file */
	env[n++] = "GIT_PROXY_COMMAND=";
	if (g->token) {
		snprintf(tokvar, sizeof(tokvar), "CAE_GIT_TOKEN=%s", g->token);
		snprintf(uservar, sizeof(uservar), "CAE_GIT_USER=%s", g->user);
		env[n++] = tokvar;
		env[n++] = uservar;
	}
	if (!g->ssl_verify)
		env[n++] = "GIT_SSL_NO_VERIFY=1";
	env[n] = NULL;
	cae_exec_request req = {
	    .argv = args,
	    .cwd = cwd,
	    .extra_env = env,
	    .timeout_ms = (int64_t)g->timeout_s * 1000,
	    .max_stdout = 64 * 1024,
	    .max_stderr = 64 * 1024,
	    .cancel_fd = -1, /* the prepare's */
	    .network = true,
	};
	int r = g->exec(g->ctx, &req, res, err);
	explicit_bzero(tokvar, sizeof(tokvar));
	return r;
}

int cae__host_exec(void *ctx, const cae_exec_request *req, cae_run_result *res, cae_error *err)
{
	const cae_host_exec_ctx *hc = ctx;
	char **envp = NULL;
	int r = cae__hostgit_env(hc->cfg, req->extra_env, &envp, err);
	if (r < 0)
		return r;
	cae_run_spec spec = cae__backend_run_spec(req, req->cwd, (const char *const *)envp);
	if (spec.cancel_fd < 0)
		spec.cancel_fd = hc->cancel_fd;
	r = cae_runner_run(&spec, res, err);
	cae__hostgit_env_free(envp);
	return r;
}

/* Last non-empty line of git's stderr, redacted, for error messages. */
static char *git_error_text(cae_run_result *res)
{
	const char *s = res->err && *res->err ? res->err : res->out ? res->out : "";
	size_t len = strlen(s);
	while (len > 0 && (s[len - 1] == '\n' || s[len - 1] == '\r'))
		len--;
	const char *start = s;
	for (size_t i = len; i > 0; i--)
		if (s[i - 1] == '\n') {
			start = s + i;
			break;
		}
	/* Prefer a "fatal:" line when there is one. */
	const char *fatal = strstr(s, "fatal: ");
	if (fatal) {
		start = fatal;
		const char *nl = strchr(fatal, '\n');
		len = nl ? (size_t)(nl - s) : len;
	}
	_cleanup_free_ char *line = strndup(start, (size_t)(s + len - start));
	char *red = cae_redact_url(line ? line : "");
	return red;
}

/* The class of a git failure from its words, for errors a user can act on: a repository or
 * branch that is not there (-ENOENT), a remote that cannot be reached (-EHOSTUNREACH),
 * credentials refused (-EACCES); anything else -EIO. */
static int git_failure_code(const char *msg)
{
	static const struct {
		const char *words;
		int code;
	} classes[] = {
	    {"not found", -ENOENT},
	    {"does not appear to be a git repository", -ENOENT},
	    {"does not exist", -ENOENT},
	    {"couldn't find remote ref", -ENOENT},
	    {"not a valid object name", -ENOENT},
	    {"did not match any file(s) known to git", -ENOENT},
	    {"Could not resolve host", -EHOSTUNREACH},
	    {"Connection refused", -EHOSTUNREACH},
	    {"Connection timed out", -EHOSTUNREACH},
	    {"Failed to connect", -EHOSTUNREACH},
	    {"Network is unreachable", -EHOSTUNREACH},
	    {"Could not read from remote repository", -EHOSTUNREACH},
	    {"Authentication failed", -EACCES},
	    {"could not read Username", -EACCES},
	    {"Permission denied", -EACCES},
	};
	for (size_t i = 0; msg && i < ARRAY_SIZE(classes); i++)
		if (strcasestr(msg, classes[i].words))
			return classes[i].code;
	return -EIO;
}

int cae__git_step(const cae_git_ctx *g, const char *cwd, const char *const *argv, const char *what,
		  cae_error *err)
{
	cae_run_result res;
	int r = cae__git_run(g, cwd, argv, &res, err);
	if (r < 0)
		return cae_error_prefix(err, "%s", what);
	if (res.exit_code != 0) {
		_cleanup_free_ char *msg = git_error_text(&res);
		r = cae_error_set(err, res.timed_out ? -EIO : git_failure_code(msg), "%s: %s%s",
				  what, res.timed_out ? "timed out: " : "",
				  msg ? msg : "git failed");
		cae_run_result_clear(&res);
		return r;
	}
	cae_run_result_clear(&res);
	return 0;
}

static cae_git_ctx git_ctx_for(const cae_config *cfg, const cae_task *task, cae_env_exec_fn exec,
			       void *ctx, const char *token, const char *user)
{
	return (cae_git_ctx){
	    .exec = exec,
	    .ctx = ctx,
	    .token = token,
	    .user = user,
	    .ssl_verify = cfg->gitlab.ssl_verify ||
			  !(task->platform && strcmp(task->platform, "gitlab") == 0),
	    .timeout_s = cfg->command_executor.clone.timeout_seconds > 0
			     ? cfg->command_executor.clone.timeout_seconds
			     : GIT_TIMEOUT_DEFAULT_S,
	};
}

/* The remote's default branch (what its HEAD names), asked of origin from the clone in dest;
 * NULL when the remote does not say. The caller frees it. */
static char *remote_default_branch(const cae_git_ctx *g, const char *dest)
{
	const char *argv[] = {CAE_GIT_ARGV, "ls-remote", "--symref", UPLOAD_PACK,
			      "origin",	    "HEAD",	 NULL};
	cae_run_result res;
	cae_error e;
	if (cae__git_run(g, dest, argv, &res, &e) < 0)
		return NULL;
	char *name = NULL;
	const char *p = res.exit_code == 0 ? strstr(res.out, "ref: refs/heads/") : NULL;
	if (p) {
		p += strlen("ref: refs/heads/");
		size_t n = strcspn(p, "\t\n");
		if (n > 0 && p[n] == '\t')
			name = strndup(p, n);
	}
	cae_run_result_clear(&res);
	return name;
}

/* The clone of task's repository from src into dest with g (the remote, or a mirror of
 * it): the clone, then for a pull request the target branch (the remote's default branch
 * when the task names none) and the deepening. */
static int clone_from(const cae_git_ctx *g, const cae_config *cfg, cae_log *log,
		      const cae_task *task, const char *src, const char *dest, cae_error *err)
{
	bool shallow = cfg->command_executor.clone.shallow;
	char depth[32];
	snprintf(depth, sizeof(depth), "--depth=%d",
		 cfg->command_executor.clone.depth > 0 ? cfg->command_executor.clone.depth : 1);
	bool pr = task->kind == CAE_TASK_PULL_REQUEST;
	/* an issue: the default branch */
	const char *branch = pr ? task->branch : NULL;

	const char *argv[CAE_GIT_ARGC + 16];
	size_t n = 0;
	for (size_t i = 0; i < CAE_GIT_ARGC; i++)
		argv[n++] = git_safe_argv[i];
	argv[n++] = "clone";
	argv[n++] = "--quiet";
	argv[n++] = UPLOAD_PACK;
	if (shallow)
		argv[n++] = depth;
	if (branch) {
		argv[n++] = "--branch";
		argv[n++] = branch;
	}
	argv[n++] = "--";
	argv[n++] = src;
	argv[n++] = dest;
	argv[n] = NULL;
	_cleanup_free_ char *red = cae_redact_url(src);
	cae_log_fields(log, CAE_LOG_INFO, "git.clone_start",
		       json_pack("{s:s, s:b, s:s?}", "url", red ? red : "", "shallow", shallow,
				 "branch", branch),
		       NULL);
	int r = cae__git_step(g, NULL, argv, "git clone", err);
	if (r < 0)
		return r;

	_cleanup_free_ char *default_branch = NULL;
	const char *target = task->target_branch;
	if (pr && !target) {
		/* git diff origin/<default>...HEAD works as with a target given, and
		 * origin/HEAD names it */
		default_branch = remote_default_branch(g, dest);
		target = default_branch;
		if (target) {
			char ref[600];
			snprintf(ref, sizeof(ref), "refs/remotes/origin/%s", target);
			const char *set_head[] = {CAE_GIT_ARGV, "symbolic-ref",
						  "refs/remotes/origin/HEAD", ref, NULL};
			r = cae__git_step(g, dest, set_head, "git symbolic-ref origin/HEAD", err);
			if (r < 0)
				return r;
		}
	}
	if (pr && target) {
		char refspec[1024], srcspec[1024], mb_ref[600];
		snprintf(refspec, sizeof(refspec), "+refs/heads/%s:refs/remotes/origin/%s", target,
			 target);
		snprintf(srcspec, sizeof(srcspec), "+refs/heads/%s:refs/remotes/origin/%s",
			 task->branch, task->branch);
		snprintf(mb_ref, sizeof(mb_ref), "origin/%s", target);
		const char *fetch[] = {
		    CAE_GIT_ARGV, "fetch", "--quiet", UPLOAD_PACK, shallow ? depth : "--no-tags",
		    "origin",	  refspec, NULL};
		r = cae__git_step(g, dest, fetch, "git fetch of the target branch", err);
		if (r < 0)
			return r;
		/* Deepen until the merge base is present, so that origin/<target>...HEAD works. */
		int deepen = 16;
		for (int round = 0; shallow; round++) {
			const char *mb[] = {CAE_GIT_ARGV, "merge-base", "HEAD", mb_ref, NULL};
			cae_run_result res;
			cae_error e2;
			if (cae__git_run(g, dest, mb, &res, &e2) == 0 && res.exit_code == 0) {
				cae_run_result_clear(&res);
				break;
			}
			cae_run_result_clear(&res);
			if (round >= 8) {
				const char *unshallow[] = {CAE_GIT_ARGV, "fetch",	"--quiet",
							   UPLOAD_PACK,	 "--unshallow", "origin",
							   srcspec,	 refspec,	NULL};
				r = cae__git_step(g, dest, unshallow, "git fetch --unshallow", err);
				if (r < 0)
					return r;
				break;
			}
			char deep[32];
			snprintf(deep, sizeof(deep), "--deepen=%d", deepen);
			deepen *= 2;
			const char *more[] = {CAE_GIT_ARGV, "fetch", "--quiet", UPLOAD_PACK, deep,
					      "origin",	    srcspec, refspec,	NULL};
			r = cae__git_step(g, dest, more, "git fetch --deepen", err);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

int cae__git_clone(cae_env_exec_fn exec, void *ctx, const cae_config *cfg, cae_log *log,
		   const cae_task *task, const char *dest, cae_error *err)
{
	_cleanup_free_ char *url = NULL;
	const char *token, *user;
	int r = cae__git_clone_source(cfg, task, &url, &token, &user, err);
	if (r < 0)
		return r;
	cae_git_ctx g = git_ctx_for(cfg, task, exec, ctx, token, user);
	r = clone_from(&g, cfg, log, task, url, dest, err);
	if (r < 0)
		return r;
	cae_log_event(log, CAE_LOG_INFO, "git.clone_done", NULL);
	return 0;
}

/* Runs argv in the environment for its effect alone: its outcome is not looked at. */
static void run_quietly(const cae_git_ctx *g, const char *const *argv)
{
	cae_exec_request req = {.argv = argv,
				.timeout_ms = (int64_t)g->timeout_s * 1000,
				.max_stdout = 4096,
				.max_stderr = 4096,
				.cancel_fd = -1};
	cae_run_result res;
	cae_error e;
	if (g->exec(g->ctx, &req, &res, &e) == 0)
		cae_run_result_clear(&res);
}

/* Empties dest (what a clone that failed half way left) in the environment. */
static void clear_dest(const cae_git_ctx *g, const char *dest)
{
	const char *argv[] = {
	    "sh", "-c", "cd -- \"$1\" 2>/dev/null || exit 0; rm -rf -- * .[!.]* ..?*",
	    "sh", dest, NULL};
	run_quietly(g, argv);
}

/* Removes what ship copied into the environment. */
static void remove_shipped(const cae_git_ctx *g, const char *path)
{
	const char *argv[] = {"rm", "-rf", "--", path, NULL};
	run_quietly(g, argv);
}

/* True when the mirror has refs/heads/<name> (a branch the task names must be there: the
 * mirror was just fetched, so one missing is missing on the remote too). */
static bool mirror_has_branch(const cae_git_ctx *hg, const char *mirror, const char *name)
{
	char ref[600];
	if (snprintf(ref, sizeof(ref), "refs/heads/%s", name) >= (int)sizeof(ref))
		return false;
	_cleanup_free_ char *gitdir = NULL;
	if (asprintf(&gitdir, "--git-dir=%s", mirror) < 0)
		return false;
	const char *argv[] = {CAE_GIT_ARGV, gitdir, "show-ref", "--verify", "--quiet", ref, NULL};
	cae_run_result res;
	cae_error e;
	if (cae__git_run(hg, NULL, argv, &res, &e) < 0)
		return false;
	bool ok = res.exit_code == 0;
	cae_run_result_clear(&res);
	return ok;
}

/* One clone from the mirror m: shipped (or read in place), cloned, origin set back to url. */
static int clone_from_mirror(const cae_git_ctx *eg, const cae_config *cfg, cae_log *log,
			     const cae_task *task, const cae_mirror *m, const char *url,
			     const char *dest, cae_mirror_ship_fn ship, void *ship_ctx,
			     cae_error *err)
{
	_cleanup_free_ char *path = NULL;
	if (ship) {
		int r = ship(ship_ctx, m->dir, &path, err);
		if (r < 0)
			return r;
	}
	_cleanup_free_ char *src = NULL;
	if (asprintf(&src, "file://%s", path ? path : m->dir) < 0)
		src = NULL;
	int r = src ? clone_from(eg, cfg, log, task, src, dest, err)
		    : cae_error_set(err, -ENOMEM, "out of memory");
	if (r == 0) {
		const char *seturl[] = {CAE_GIT_ARGV, "remote", "set-url", "origin", url, NULL};
		r = cae__git_step(eg, dest, seturl, "git remote set-url", err);
	}
	if (path)
		remove_shipped(eg, path);
	return r;
}

int cae__git_clone_cached(cae_env_exec_fn exec, void *ctx, const cae_config *cfg, cae_log *log,
			  const cae_task *task, const char *dest, cae_mirror_ship_fn ship,
			  void *ship_ctx, int cancel_fd, cae_error *err)
{
	if (!cfg->command_executor.clone.mirror_cache.enabled ||
	    (task->repo && is_local_path(task->repo)) || !cfg->command_executor.state_dir)
		return cae__git_clone(exec, ctx, cfg, log, task, dest, err);
	_cleanup_free_ char *url = NULL;
	const char *token, *user;
	int r = cae__git_clone_source(cfg, task, &url, &token, &user, err);
	if (r < 0)
		return r;
	/* the mirror's git on this host with the token; the environment's without any */
	cae_host_exec_ctx hc = {.cfg = cfg, .cancel_fd = cancel_fd};
	cae_git_ctx hg = git_ctx_for(cfg, task, cae__host_exec, &hc, token, user);
	cae_git_ctx eg = git_ctx_for(cfg, task, exec, ctx, NULL, NULL);
	bool pr = task->kind == CAE_TASK_PULL_REQUEST;
	cae_mirror m = {.fd = -1};
	cae_error me = {0};
	r = -EAGAIN;
	for (int attempt = 0; attempt < 2; attempt++) {
		r = cae__mirror_open(cfg, log, url, &hg, attempt > 0, cancel_fd, &m, &me);
		if (r < 0)
			break;
		if ((pr && task->branch && !mirror_has_branch(&hg, m.dir, task->branch)) ||
		    (pr && task->target_branch &&
		     !mirror_has_branch(&hg, m.dir, task->target_branch))) {
			/* the remote's clone says so, in its own words */
			r = cae_error_set(&me, -ENOENT,
					  "a branch of the task is not on the remote");
			break;
		}
		r = clone_from_mirror(&eg, cfg, log, task, &m, url, dest, ship, ship_ctx, &me);
		if (r == 0 || (r != -EIO && r != -ENOENT))
			break;
		/* git failed reading the mirror (a corrupt or missing object, most likely): never
		 * trust it */
		cae_log_fields(log, CAE_LOG_WARN, "git.mirror_rebuild",
			       json_pack("{s:s, s:s}", "reason", "a clone from the mirror failed",
					 "error", me.message),
			       NULL);
		clear_dest(&eg, dest);
		cae__mirror_close(&m);
	}
	cae__mirror_close(&m);
	if (r == 0) {
		cae_log_event(log, CAE_LOG_INFO, "git.clone_done", NULL);
		return 0;
	}
	struct pollfd pc = {.fd = cancel_fd, .events = POLLIN};
	if (r == -ECANCELED || (cancel_fd >= 0 && poll(&pc, 1, 0) > 0)) {
		if (err)
			*err = me;
		return cae_error_set(err, -ECANCELED, "cancelled: %s", me.message);
	}
	_cleanup_free_ char *red = cae_redact_url(url);
	cae_log_fields(log, CAE_LOG_WARN, "git.mirror_unused",
		       json_pack("{s:s, s:s}", "url", red ? red : "", "error", me.message),
		       "cloning from the remote");
	clear_dest(&eg, dest);
	return cae__git_clone(exec, ctx, cfg, log, task, dest, err);
}
