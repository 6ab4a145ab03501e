/* The command-executor section's words about the environment commands run in
 * (cae_prompt_command_executor_for): the backend as it is, the tools that exist there,
 * examples that use them, and the dependency step as it went. */
#include "cae/prompt.h"

#include "prompt/prompt-internal.h"

#include "backend/images.h"
#include "base/buf.h"
#include "base/macro.h"
#include "cae/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/banned.h"

/* The sandbox of the local backend sees this host's system trees: where it finds programs. */
static const char *const local_path[] = {"/usr/local/bin", "/usr/bin", "/bin"};

static bool host_has(const char *tool)
{
	for (size_t i = 0; i < ARRAY_SIZE(local_path); i++) {
		char path[256];
		snprintf(path, sizeof(path), "%s/%s", local_path[i], tool);
		if (access(path, X_OK) == 0)
			return true;
	}
	return false;
}

/* A tool the agent is told of: there (on the local backend: on this host), and not one the
 * operator took out of the policy's default list or the policy refuses. */
static bool offered(const char *tool, bool local, const cae_policy *policy,
		    const cae_policy *defaults)
{
	if (local && !host_has(tool))
		return false;
	if (!policy)
		return true;
	if (defaults && cae_policy_is_listed(defaults, tool) && !cae_policy_is_listed(policy, tool))
		return false;
	cae_policy_verdict v;
	return cae_policy_check(policy, tool, &v) == 0 && v.allowed;
}

static const char *execution_environment(const char *backend)
{
	if (strcmp(backend, "docker") == 0)
		return "an isolated Docker container";
	if (strcmp(backend, "kubernetes") == 0)
		return "an isolated Kubernetes pod";
	if (strcmp(backend, "local") == 0)
		return "an isolated sandbox on this host (bubblewrap, the local backend)";
	return "an isolated execution environment";
}

/* Examples by environment: test, build, lint; each example's first word is its tool. */
static const struct {
	const char *env;
	const char *const ex[3][4];
} examples[] = {
    {"python",
     {{"pytest", "python -m pytest -x", "make test"},
      {"make", "pip install -e ."},
      {"black --check .", "flake8", "mypy ."}}},
    {"node",
     {{"npm test", "npx jest", "make test"},
      {"npm run build", "tsc --noEmit", "make"},
      {"eslint .", "npx prettier --check ."}}},
    {"java",
     {{"mvn test", "gradle test", "./gradlew test"},
      {"mvn -q package", "gradle build", "make"},
      {"mvn -q verify"}}},
    {"go",
     {{"go test ./...", "make test"}, {"go build ./...", "make"}, {"go vet ./...", "gofmt -l ."}}},
    {"miniforge",
     {{"pytest", "python -m pytest -x", "make test"},
      {"mamba env update -f environment.yml", "make"},
      {"python -m compileall -q ."}}},
};

static int put_examples(cae_buf *b, const char *env, int kind, bool local, const cae_policy *pol,
			const cae_policy *defaults)
{
	int r = 0, n = 0;
	for (size_t i = 0; i < ARRAY_SIZE(examples); i++) {
		if (strcmp(examples[i].env, env) != 0)
			continue;
		for (size_t k = 0; k < 4 && examples[i].ex[kind][k]; k++) {
			const char *e = examples[i].ex[kind][k];
			char tool[64];
			snprintf(tool, sizeof(tool), "%.*s", (int)strcspn(e, " "), e);
			if (tool[0] != '.' && !offered(tool, local, pol, defaults))
				continue;
			r |= cae__buf_printf(b, "%s`%s`", n++ ? ", " : "", e);
		}
	}
	if (n == 0)
		r |= cae__buf_puts(b, kind == 0	  ? "the project's own test command"
				      : kind == 1 ? "the project's own build command"
						  : "the project's own linters");
	return r;
}

static int put_tools(cae_buf *b, const char *env, const char *image, bool local,
		     const cae_policy *pol, const cae_policy *defaults)
{
	const char *const *tools = cae__image_tools(env);
	if (!tools)
		return cae__buf_printf(b,
				       "The tools of image `%s` are not known to cae: check with "
				       "`command -v TOOL` before relying on one.",
				       image ? image : "?");
	int r = cae__buf_printf(b, "%s: ",
				local ? "Installed on this host for this environment"
				      : "Installed in this environment");
	int n = 0;
	for (size_t i = 0; tools[i]; i++)
		if (offered(tools[i], local, pol, defaults))
			r |= cae__buf_printf(b, "%s`%s`", n++ ? ", " : "", tools[i]);
	if (n == 0)
		r |= cae__buf_puts(b, "none of this environment's usual tools");
	r |= cae__buf_puts(b,
			   ". Other programs are not installed unless the project installs them.");
	return r;
}

static int put_deps(cae_buf *b, const cae_config *cfg, const json_t *deps)
{
	if (!deps)
		return cae__buf_puts(
		    b, cfg->command_executor.clone.auto_install_deps
			   ? "installed when the environment is prepared; the `deps` list of the "
			     "`environment_prepare` result says for each install whether it "
			     "succeeded, "
			     "failed or was skipped (install what failed yourself)"
			   : "not installed automatically (clone.auto_install_deps is off): "
			     "install them "
			     "yourself");
	if (json_array_size(deps) == 0)
		return cae__buf_puts(b, "none installed (no dependency file cae knows was found)");
	int r = 0;
	size_t i;
	json_t *d;
	bool failed = false;
	json_array_foreach((json_t *)deps, i, d)
	{
		const char *cmd = json_string_value(json_object_get(d, "command"));
		const char *man = json_string_value(json_object_get(d, "manifest"));
		const char *why = json_string_value(json_object_get(d, "error"));
		bool ok = json_is_true(json_object_get(d, "success"));
		bool skipped = json_is_true(json_object_get(d, "skipped"));
		failed |= !ok;
		r |= cae__buf_printf(b, "%s`%s` (%s): %s%s%s", i ? "; " : "", cmd ? cmd : "?",
				     man ? man : "?",
				     ok	       ? "installed"
				     : skipped ? "skipped"
					       : "FAILED",
				     !ok && why ? ", " : "", !ok && why ? why : "");
	}
	if (failed)
		r |= cae__buf_puts(b, ". Install what failed or was skipped yourself");
	return r;
}

char *cae__prompt_context_fill(const char *text, const cae_config *cfg, const cae_policy *policy,
			       const cae_prompt_context *ctx)
{
	const char *backend = ctx && ctx->backend ? ctx->backend : cae_backend_resolve_name(cfg);
	const char *env =
	    ctx && ctx->environment ? ctx->environment : cfg->command_executor.default_environment;
	if (!env)
		env = "python";
	bool local = strcmp(backend, "local") == 0;
	cae_policy *defaults = policy ? cae_policy_new(NULL, NULL) : NULL;
	const char *image = cae_config_environment_image(cfg, env);
	struct {
		const char *token;
		cae_buf b;
	} v[] = {{"{execution_environment}"}, {"{environment_name}"}, {"{environment_tools}"},
		 {"{dependencies}"},	      {"{test_examples}"},    {"{build_examples}"},
		 {"{lint_examples}"}};
	int r = 0;
	for (size_t i = 0; i < ARRAY_SIZE(v); i++)
		cae__buf_init(&v[i].b, 1u << 20);
	r |= cae__buf_puts(&v[0].b, execution_environment(backend));
	r |= image && !local ? cae__buf_printf(&v[1].b, "`%s` (image `%s`)", env, image)
			     : cae__buf_printf(&v[1].b, "`%s`", env);
	r |= put_tools(&v[2].b, env, image, local, policy, defaults);
	r |= put_deps(&v[3].b, cfg, ctx ? ctx->deps : NULL);
	for (int k = 0; k < 3; k++)
		r |= put_examples(&v[4 + k].b, env, k, local, policy, defaults);
	char *cur = r < 0 ? NULL : strdup(text);
	for (size_t i = 0; i < ARRAY_SIZE(v); i++) {
		if (cur) {
			char *next =
			    cae__prompt_replace(cur, v[i].token, v[i].b.data ? v[i].b.data : "");
			free(cur);
			cur = next;
		}
		cae__buf_clear(&v[i].b);
	}
	cae_policy_free(defaults);
	return cur;
}
