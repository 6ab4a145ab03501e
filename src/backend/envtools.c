/* The tools an environment name stands for (envtools.h), and the check of a local
 * environment's host for them. */
#include "backend/envtools.h"

#include "base/macro.h"

#include <stdio.h>
#include <string.h>

#include "base/banned.h"

static const struct {
	const char *name;
	const char *tools; /* space-separated programs, as found on PATH */
} env_tools[] = {
    {"python", "python3"}, {"miniforge", "conda python3"},
    {"node", "node npm"},  {"java", "java javac mvn"},
    {"go", "go"},
};

const char *cae__env_tools(const char *environment)
{
	for (size_t i = 0; environment && i < ARRAY_SIZE(env_tools); i++)
		if (strcmp(environment, env_tools[i].name) == 0)
			return env_tools[i].tools;
	return NULL;
}

void cae__env_tools_check(cae_prepare *p)
{
	const char *tools = cae__env_tools(p->environment);
	if (!tools || !p->exec)
		return;
	char script[512];
	snprintf(script, sizeof(script),
		 "for t in %s; do command -v \"$t\" >/dev/null 2>&1 || printf '%%s ' \"$t\"; "
		 "done; exit 0",
		 tools);
	const char *argv[] = {"sh", "-c", script, NULL};
	cae_exec_request req = {.argv = argv,
				.cwd = p->project,
				.timeout_ms = 30000,
				.max_stdout = 4096,
				.max_stderr = 4096,
				.cancel_fd = -1};
	cae_run_result res;
	cae_error err;
	cae_error_clear(&err);
	char msg[1200];
	if (p->exec(p->exec_ctx, &req, &res, &err) < 0) {
		snprintf(msg, sizeof(msg),
			 "could not look for the tools of environment %s: %.1000s", p->environment,
			 err.message);
		cae__prepare_warn(p, "environment.tools_unknown", msg);
		return;
	}
	size_t n = res.out ? strlen(res.out) : 0;
	while (n && res.out[n - 1] == ' ')
		n--;
	if (n) {
		snprintf(msg, sizeof(msg),
			 "this host lacks %.*s for environment %s (the local backend runs the "
			 "host's own tools; needs: %s)",
			 (int)MIN(n, 400), res.out, p->environment, tools);
		cae__prepare_warn(p, "environment.tools_missing", msg);
	}
	cae_run_result_clear(&res);
}
