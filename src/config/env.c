/* Environment variables: the keys' overrides (the table names each key's variable) and
 * the variables the default state directory depends on. */
#include "config/config-internal.h"

#include <string.h>

#include "base/fs.h"
#include "base/banned.h"

static const char *env_get(char *const *envp, const char *name)
{
	size_t n = strlen(name);
	for (char *const *e = envp; e && *e; e++)
		if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

const char *cae__cfg_env_get(char *const *envp, const char *name)
{
	const char *v = env_get(envp, name);
	return v && *v ? v : NULL;
}

int cae__cfg_apply_env(struct cfg_ctx *c)
{
	for (size_t i = 0; i < cfg_nkeys; i++) {
		if (!cfg_keys[i].env)
			continue;
		const char *v = cae__cfg_env_get(c->envp, cfg_keys[i].env);
		if (!v)
			continue;
		struct cfg_where w = {.env = cfg_keys[i].env};
		int r = cae__cfg_set_from_text(c, (int)i, v, strlen(v), &w, false);
		if (r < 0)
			return r;
		c->origin[i] = w;
	}
	return 0;
}

char *cae__cfg_default_state_dir(char *const *envp)
{
	const char *xdg = cae__cfg_env_get(envp, "XDG_STATE_HOME");
	if (xdg && xdg[0] == '/')
		return cae__path_join(xdg, "cae");
	const char *home = cae__cfg_env_get(envp, "HOME");
	if (home && home[0] == '/')
		return cae__path_join(home, ".local/state/cae");
	return strdup("/var/lib/cae");
}
