/* Dependency installation (the prepare step after the clone), shared by every backend.
 *
 * Each manifest found in the project's top directory names an installer; a missing tool is a
 * warning naming it (the prepare goes on). Where a lock file names a tool (uv.lock, poetry.lock,
 * pdm.lock next to pyproject.toml), that tool installs the project when the environment has
 * it, else pip does, with a warning. Conda environments (environment.yml) are made under the
 * user's home, never in the image's root-owned base environment, since commands do not run as
 * root. */
#include "backend/backend-internal.h"

#include "base/macro.h"
#include "cae/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

#define DEPS_TIMEOUT_MS (600 * 1000)

struct installer {
	const char *manifest; /* file that triggers it */
	const char *tool;     /* program that must exist */
	const char *command;  /* sh -c text */
	/* run instead when tool is missing (a warning says so); NULL: skipped */
	const struct installer *fallback;
	bool pip; /* installs with pip: into the backend's virtual environment, if any */
};

/* pip installs the project editable (the agent's changes are what imports see). Without
 * build isolation first: the image's build backend (setuptools) needs no index, which an
 * offline environment has not; with it when the project's backend is not installed. */
static const struct installer pip_project = {
    "pyproject.toml", "python3",
    "python3 -m pip install --no-build-isolation -e . || python3 -m pip install -e .", NULL, true};

/* The lock file names the tool; the first row whose lock file is there is used. */
static const struct installer python_installers[] = {
    {"uv.lock", "uv", "uv sync", &pip_project},
    {"poetry.lock", "poetry", "poetry install --no-interaction", &pip_project},
    {"pdm.lock", "pdm", "pdm install", &pip_project},
};

/* A user-owned prefix: ~/.conda/envs/project (conda activate ~/.conda/envs/project). */
#define CONDA_PREFIX "\"${HOME:-/tmp}/.conda/envs/project\""
static const struct installer conda_env = {
    "environment.yml", "conda", "conda env update -p " CONDA_PREFIX " -f environment.yml", NULL};
static const struct installer conda_env2 = {
    "condaenv.yaml", "conda", "conda env update -p " CONDA_PREFIX " -f condaenv.yaml", NULL};

/* Lock file decides the Node package manager; the first matching row wins per group. */
static const struct installer node_installers[] = {
    {"pnpm-lock.yaml", "pnpm", "pnpm install --frozen-lockfile"},
    {"yarn.lock", "yarn", "yarn install --frozen-lockfile"},
    {"package-lock.json", "npm", "npm ci"},
    {"package.json", "npm", "npm install"},
};

static const struct installer other_installers[] = {
    {"requirements.txt", "python3", "python3 -m pip install -r requirements.txt", NULL, true},
    {"environment.yml", "mamba", "mamba env update -p " CONDA_PREFIX " -f environment.yml",
     &conda_env},
    {"condaenv.yaml", "mamba", "mamba env update -p " CONDA_PREFIX " -f condaenv.yaml",
     &conda_env2},
    {"Cargo.toml", "cargo", "cargo fetch", NULL},
    {"Gemfile", "bundle", "bundle install"},
    {"pom.xml", "mvn", "mvn -q -B dependency:resolve dependency:resolve-plugins"},
    {"build.gradle", "gradle", "gradle --quiet dependencies"},
    {"build.gradle.kts", "gradle", "gradle --quiet dependencies"},
    {"go.mod", "go", "go mod download"},
};

static bool has_line(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; p && *p;) {
		const char *nl = strchr(p, '\n');
		size_t l = nl ? (size_t)(nl - p) : strlen(p);
		if (l == n && strncmp(p, name, n) == 0)
			return true;
		if (!nl)
			break;
		p = nl + 1;
	}
	return false;
}

/* "cae: TOOL not found" on stderr: the marker of a missing tool. */
static bool said_missing(const char *err, const char *tool)
{
	char marker[128];
	snprintf(marker, sizeof(marker), "cae: %s not found", tool);
	return err && strstr(err, marker);
}

/* The shell text that makes the virtual environment venv (when python3 is there and it is
 * missing) and puts it first on PATH for what follows; uv is told to use it too. When it
 * cannot be made, pip's own error says why the install failed. */
static void venv_prefix(char *out, size_t size, const char *venv)
{
	if (!venv) {
		out[0] = '\0';
		return;
	}
	snprintf(
	    out, size,
	    "V='%s'; if command -v python3 >/dev/null 2>&1 && { [ -x \"$V/bin/python3\" ] "
	    "|| python3 -m venv --system-site-packages \"$V\" >&2; }; then "
	    "PATH=\"$V/bin:$PATH\" VIRTUAL_ENV=\"$V\" UV_PROJECT_ENVIRONMENT=\"$V\" "
	    "PIP_DISABLE_PIP_VERSION_CHECK=1; "
	    "export PATH VIRTUAL_ENV UV_PROJECT_ENVIRONMENT PIP_DISABLE_PIP_VERSION_CHECK; fi; ",
	    venv);
}

static void install_one(cae_env_exec_fn exec, void *ctx, cae_log *log, const char *project,
			const cae_deps_opts *opts, const struct installer *in, json_t *deps,
			json_t *warnings, int cancel_fd)
{
	char script[2048], pre[512];
	const struct installer *fb = in->fallback;
	venv_prefix(pre, sizeof(pre),
		    opts && (in->pip || (fb && fb->pip)) ? opts->python_venv : NULL);
	/* 127 with a marker: the tool is missing in this environment. */
	if (fb)
		snprintf(script, sizeof(script),
			 "%sif command -v %s >/dev/null 2>&1; then %s; else echo 'cae: %s not "
			 "found' >&2; command -v %s >/dev/null 2>&1 || { echo 'cae: %s not found' "
			 ">&2; exit 127; }; %s; fi",
			 pre, in->tool, in->command, in->tool, fb->tool, fb->tool, fb->command);
	else
		snprintf(script, sizeof(script),
			 "%scommand -v %s >/dev/null 2>&1 || { echo 'cae: %s not found' >&2; exit "
			 "127; }; %s",
			 pre, in->tool, in->tool, in->command);
	const char *argv[] = {"sh", "-c", script, NULL};
	/* npm's audit (a request the registry answers per install, whose report nobody reads
	 * here: an agent runs `npm audit` itself), its funding note and its update check are
	 * left out of the prepare's install; with the shared cache, `npm ci` (the lock file pins
	 * every tarball by its integrity, and no metadata is read) takes the cache offline */
	static const char *const npm_env[] = {"npm_config_audit=false", "npm_config_fund=false",
					      "npm_config_update_notifier=false", NULL};
	static const char *const offline_env[] = {"npm_config_audit=false", "npm_config_fund=false",
						  "npm_config_update_notifier=false",
						  "npm_config_prefer_offline=true", NULL};
	bool npm = strcmp(in->tool, "npm") == 0;
	bool offline = npm && opts && opts->npm_cache_shared && strcmp(in->command, "npm ci") == 0;
	cae_exec_request req = {
	    .argv = argv,
	    .extra_env = offline ? offline_env
			 : npm	 ? npm_env
				 : NULL,
	    .cwd = project,
	    .timeout_ms = DEPS_TIMEOUT_MS,
	    .max_stdout = 64 * 1024,
	    .max_stderr = 64 * 1024,
	    .truncate = CAE_TRUNCATE_HEAD_TAIL,
	    .cancel_fd = cancel_fd,
	    .network = true,
	};
	cae_run_result res;
	cae_error err;
	cae_error_clear(&err);
	if (npm && opts && opts->npm_tree_linked && strcmp(in->command, "npm ci") == 0) {
		/* what `npm ci` would make is already there (pkgcache.h) */
		json_t *t =
		    json_pack("{s:s, s:s, s:b, s:i, s:I, s:b}", "manifest", in->manifest, "command",
			      in->command, "success", 1, "exit_code", 0, "duration_ms",
			      (json_int_t)opts->npm_tree_ms, "shared_node_modules", 1);
		cae_log_fields(log, CAE_LOG_INFO, "deps.install", json_deep_copy(t), NULL);
		json_array_append_new(deps, t);
		return;
	}
	int r = exec(ctx, &req, &res, &err);
	/* A shared cache with an entry that fails its integrity check (another environment
	 * changed it: npm refuses it, EINTEGRITY): once more with a cache of this environment's
	 * own, so that a bad entry costs a download, never the install. */
	bool bypassed = false;
	if (offline && r >= 0 && res.exit_code != 0 && !res.timed_out &&
	    ((res.err && strstr(res.err, "EINTEGRITY")) ||
	     (res.out && strstr(res.out, "EINTEGRITY")))) {
		char again[sizeof(script) + 96];
		snprintf(again, sizeof(again),
			 "npm_config_cache=\"${HOME:-/tmp}/.npm-own\"; export npm_config_cache; %s",
			 script);
		argv[2] = again;
		req.extra_env = npm_env;
		cae_run_result_clear(&res);
		r = exec(ctx, &req, &res, &err);
		argv[2] = script;
		bypassed = true;
	}
	/* with a fallback, what ran is known from the marker */
	bool fell_back = fb && r >= 0 && said_missing(res.err, in->tool);
	const struct installer *ran = fell_back ? fb : in;
	json_t *d = json_pack("{s:s, s:s}", "manifest", fb ? fb->manifest : in->manifest, "command",
			      ran->command);
	char warn[1400];
	if (fell_back) {
		snprintf(warn, sizeof(warn), "%s is not installed (%s): `%s` instead", in->tool,
			 in->manifest, fb->command);
		json_array_append_new(warnings, json_string(warn));
	}
	if (fb && strcmp(in->manifest, fb->manifest) != 0)
		json_object_set_new(d, "lock_file", json_string(in->manifest));
	if (bypassed) {
		json_array_append_new(
		    warnings,
		    json_string("the shared npm cache has an entry that fails its "
				"integrity check: `npm ci` ran again with this "
				"environment's own cache (command_executor.package_cache)"));
		json_object_set_new(d, "shared_cache_bypassed", json_true());
	}
	if (npm && opts && strcmp(in->command, "npm ci") == 0 && !bypassed && r >= 0 &&
	    res.exit_code == 0 && !res.timed_out && opts->npm_installed)
		opts->npm_installed(opts->npm_installed_ctx);
	if (r >= 0 && opts && opts->maven_installed && strcmp(in->tool, "mvn") == 0)
		opts->maven_installed(opts->maven_installed_ctx);
	if (r < 0) {
		json_object_set_new(d, "success", json_false());
		json_object_set_new(d, "error", json_string(err.message));
		snprintf(warn, sizeof(warn), "dependency install for %s failed: %.1100s",
			 in->manifest, err.message);
		json_array_append_new(warnings, json_string(warn));
	} else {
		bool missing = res.exit_code == 127 && said_missing(res.err, ran->tool);
		bool ok = res.exit_code == 0 && !res.timed_out;
		json_object_set_new(d, "success", json_boolean(ok));
		json_object_set_new(d, "exit_code", json_integer(res.exit_code));
		json_object_set_new(d, "duration_ms", json_integer(res.duration_ms));
		if (missing) {
			json_object_set_new(d, "skipped", json_true());
			if (fb)
				snprintf(warn, sizeof(warn),
					 "%s found but neither %s nor %s is installed: skipped",
					 fb->manifest, in->tool, fb->tool);
			else
				snprintf(warn, sizeof(warn),
					 "%s found but %s is not installed: skipped", ran->manifest,
					 ran->tool);
			json_object_set_new(d, "error", json_string(warn));
			json_array_append_new(warnings, json_string(warn));
		} else if (!ok) {
			if (res.timed_out)
				snprintf(warn, sizeof(warn),
					 "dependency install `%s` timed out after 600 s",
					 ran->command);
			else
				snprintf(warn, sizeof(warn),
					 "dependency install `%s` failed with exit code %d",
					 ran->command, res.exit_code);
			json_object_set_new(d, "error", json_string(warn));
			/* The tail of the output says why; keep a bounded piece. */
			const char *tail = res.err && *res.err ? res.err : res.out ? res.out : "";
			size_t tl = strlen(tail);
			json_object_set_new(d, "output",
					    json_string(tl > 2000 ? tail + tl - 2000 : tail));
			json_array_append_new(warnings, json_string(warn));
		}
		cae_run_result_clear(&res);
	}
	cae_log_fields(log,
		       json_is_true(json_object_get(d, "success")) ? CAE_LOG_INFO : CAE_LOG_WARN,
		       "deps.install", json_deep_copy(d), NULL);
	json_array_append_new(deps, d);
}

void cae__deps_install(cae_env_exec_fn exec, void *ctx, cae_log *log, const char *project,
		       const cae_deps_opts *opts, json_t *deps, json_t *warnings, int cancel_fd)
{
	/* One round trip lists the manifests present. */
	static const char list_script[] =
	    "for f in package.json pnpm-lock.yaml yarn.lock package-lock.json requirements.txt "
	    "pyproject.toml uv.lock poetry.lock pdm.lock Cargo.toml "
	    "environment.yml condaenv.yaml Gemfile pom.xml build.gradle build.gradle.kts go.mod; "
	    "do [ -f \"$f\" ] && echo \"$f\"; done; exit 0";
	const char *argv[] = {"sh", "-c", list_script, NULL};
	cae_exec_request req = {.argv = argv,
				.cwd = project,
				.timeout_ms = 30000,
				.max_stdout = 4096,
				.max_stderr = 4096,
				.cancel_fd = -1};
	cae_run_result res;
	cae_error err;
	if (exec(ctx, &req, &res, &err) < 0) {
		char warn[1200];
		snprintf(warn, sizeof(warn), "could not look for dependency manifests: %.1100s",
			 err.message);
		json_array_append_new(warnings, json_string(warn));
		return;
	}
	if (has_line(res.out, "package.json"))
		for (size_t i = 0; i < ARRAY_SIZE(node_installers); i++)
			if (has_line(res.out, node_installers[i].manifest)) {
				install_one(exec, ctx, log, project, opts, &node_installers[i],
					    deps, warnings, cancel_fd);
				break;
			}
	if (has_line(res.out, "pyproject.toml")) {
		const struct installer *py = &pip_project;
		for (size_t i = 0; i < ARRAY_SIZE(python_installers); i++)
			if (has_line(res.out, python_installers[i].manifest)) {
				py = &python_installers[i];
				break;
			}
		install_one(exec, ctx, log, project, opts, py, deps, warnings, cancel_fd);
	}
	for (size_t i = 0; i < ARRAY_SIZE(other_installers); i++) {
		const struct installer *in = &other_installers[i];
		if (!has_line(res.out, in->manifest))
			continue;
		/* environment.yml wins over condaenv.yaml; build.gradle over its .kts twin. */
		if (strcmp(in->manifest, "condaenv.yaml") == 0 &&
		    has_line(res.out, "environment.yml"))
			continue;
		if (strcmp(in->manifest, "build.gradle.kts") == 0 &&
		    has_line(res.out, "build.gradle"))
			continue;
		install_one(exec, ctx, log, project, opts, in, deps, warnings, cancel_fd);
	}
	cae_run_result_clear(&res);
}
