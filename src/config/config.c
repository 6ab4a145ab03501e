/* The config's lifecycle: built-in defaults, then the file (found as cae/config.h says),
 * then the environment, then the rules across keys; copies, cae_config_set() (all or
 * nothing, on a copy) and free. The parts are in the module's other files
 * (config-internal.h lists them). */
#include "config/config-internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "base/macro.h"
#include "base/banned.h"

extern char **environ;

cae_config *cae_config_defaults(char *const *envp)
{
	if (!envp)
		envp = environ;
	cae_config *cfg = calloc(1, sizeof(*cfg));
	if (!cfg)
		return NULL;
	struct cfg_ctx c = {.cfg = cfg, .envp = envp};
	for (size_t i = 0; i < cfg_nkeys; i++) {
		if (!cfg_keys[i].def)
			continue;
		if (cae__cfg_set_from_text(&c, (int)i, cfg_keys[i].def, strlen(cfg_keys[i].def),
					   NULL, false) < 0) {
			cae_config_free(cfg);
			return NULL;
		}
	}
	cfg->command_executor.state_dir = cae__cfg_default_state_dir(envp);
	if (!cfg->command_executor.state_dir) {
		cae_config_free(cfg);
		return NULL;
	}
	return cfg;
}

/* file: the name for messages; NULL when there is no file (text is ignored). */
static int load_common(cae_config **out, const char *text, size_t len, const char *file,
		       char *const *envp, cae_error *err)
{
	*out = NULL;
	if (!envp)
		envp = environ;
	cae_config *cfg = cae_config_defaults(envp);
	if (!cfg)
		return cae_error_set(err, -ENOMEM, "out of memory");
	struct cfg_ctx c = {.cfg = cfg, .envp = envp, .err = err, .file = file};
	int r = 0;
	if (file) {
		cfg->source = strdup(file);
		if (!cfg->source)
			r = -ENOMEM;
		else if (len > CAE_CONFIG_MAX_BYTES)
			r = cae_error_set(err, -EFBIG, "%s: larger than %d bytes", file,
					  CAE_CONFIG_MAX_BYTES);
		else
			r = cae__cfg_apply_yaml(&c, text, len);
	}
	if (r >= 0)
		r = cae__cfg_apply_env(&c);
	if (r >= 0)
		r = cae__cfg_validate(&c, true);
	if (r < 0) {
		if (r == -ENOMEM)
			cae_error_set(err, r, "out of memory while loading the config");
		cae_config_free(cfg);
		return r;
	}
	*out = cfg;
	return 0;
}

int cae_config_load_string(cae_config **out, const char *text, size_t len, const char *filename,
			   char *const *envp, cae_error *err)
{
	if (!out || (!text && len))
		return cae_error_set(err, -EINVAL, "invalid argument");
	return load_common(out, text ? text : "", len, filename ? filename : "<string>", envp, err);
}

/* Reads path; *found = false (and 0) when it does not exist and may be skipped. */
static int read_config_file(const char *path, bool must_exist, char **text, size_t *len,
			    bool *found, cae_error *err)
{
	*found = false;
	int r = cae__read_file(AT_FDCWD, path, CAE_CONFIG_MAX_BYTES, text, len);
	if (r == -ENOENT && !must_exist)
		return 0;
	if (r == -EFBIG)
		return cae_error_set(err, r, "%s: larger than %d bytes", path,
				     CAE_CONFIG_MAX_BYTES);
	if (r == -ENOENT)
		return cae_error_set(err, r, "%s: config file not found", path);
	if (r < 0)
		return cae_error_set(err, r, "%s: cannot read the config file: %s", path,
				     strerror(-r));
	*found = true;
	return 0;
}

int cae_config_load(cae_config **out, const char *path, char *const *envp, cae_error *err)
{
	if (!out)
		return cae_error_set(err, -EINVAL, "invalid argument");
	*out = NULL;
	if (!envp)
		envp = environ;
	_cleanup_free_ char *text = NULL;
	_cleanup_free_ char *xdg_path = NULL;
	size_t len = 0;
	bool found = false;
	int r;

	const char *file = path;
	if (!file)
		file = cae__cfg_env_get(envp, "CAE_CONFIG");
	if (file) {
		r = read_config_file(file, true, &text, &len, &found, err);
		if (r < 0)
			return r;
	} else {
		file = "config.yaml";
		r = read_config_file(file, false, &text, &len, &found, err);
		if (r < 0)
			return r;
		if (!found) {
			const char *xdg = cae__cfg_env_get(envp, "XDG_CONFIG_HOME");
			const char *home = cae__cfg_env_get(envp, "HOME");
			if (xdg && xdg[0] == '/')
				xdg_path = cae__path_join(xdg, "cae/config.yaml");
			else if (home)
				xdg_path = cae__path_join(home, ".config/cae/config.yaml");
			if (xdg_path) {
				file = xdg_path;
				r = read_config_file(file, false, &text, &len, &found, err);
				if (r < 0)
					return r;
			}
		}
	}
	return load_common(out, text, len, found ? file : NULL, envp, err);
}

static int strlist_copy(cae_config_strlist *dst, const cae_config_strlist *src)
{
	*dst = (cae_config_strlist){0};
	for (size_t i = 0; i < src->n; i++)
		if (cae__cfg_strlist_push(dst, src->items[i], strlen(src->items[i])) < 0)
			return -ENOMEM;
	return 0;
}

cae_config *cae_config_dup(const cae_config *src)
{
	if (!src)
		return NULL;
	cae_config *cfg = malloc(sizeof(*cfg));
	if (!cfg)
		return NULL;
	memcpy(cfg, src, sizeof(*cfg));
	/* first detach every owned pointer, so that a failure half-way frees only copies */
	for (size_t i = 0; i < cfg_nkeys; i++) {
		const struct cfg_key *k = &cfg_keys[i];
		if (k->alias_of)
			continue;
		if (k->type == V_STRING || k->type == V_MEMSIZE)
			*(char **)cae__cfg_field(cfg, k->off) = NULL;
		else if (k->type == V_STRLIST)
			*(cae_config_strlist *)cae__cfg_field(cfg, k->off) =
			    (cae_config_strlist){0};
	}
	cfg->command_executor.environments = NULL;
	cfg->command_executor.n_environments = 0;
	cfg->warnings = (cae_config_strlist){0};
	cfg->source = NULL;

	int r = 0;
	for (size_t i = 0; i < cfg_nkeys && r >= 0; i++) {
		const struct cfg_key *k = &cfg_keys[i];
		if (k->alias_of)
			continue;
		if (k->type == V_STRING || k->type == V_MEMSIZE)
			r = cae__cfg_set_string(cfg, k->off,
						*(char *const *)cae__cfg_cfield(src, k->off));
		else if (k->type == V_STRLIST)
			r = strlist_copy(cae__cfg_field(cfg, k->off), cae__cfg_cfield(src, k->off));
	}
	for (size_t i = 0; i < src->command_executor.n_environments && r >= 0; i++) {
		const cae_config_environment *e = &src->command_executor.environments[i];
		cae_config_environment *m =
		    realloc(cfg->command_executor.environments, (i + 1) * sizeof(*m));
		if (!m) {
			r = -ENOMEM;
			break;
		}
		cfg->command_executor.environments = m;
		m[i].name = strdup(e->name);
		m[i].image = strdup(e->image);
		cfg->command_executor.n_environments = i + 1;
		if (!m[i].name || !m[i].image)
			r = -ENOMEM;
	}
	if (r >= 0)
		r = strlist_copy(&cfg->warnings, &src->warnings);
	if (r >= 0 && src->source && !(cfg->source = strdup(src->source)))
		r = -ENOMEM;
	if (r < 0) {
		cae_config_free(cfg);
		return NULL;
	}
	return cfg;
}

int cae_config_set(cae_config *cfg, const char *key, const char *value, cae_error *err)
{
	if (!cfg || !key || !value)
		return cae_error_set(err, -EINVAL, "invalid argument");
	int idx = cae__cfg_canonical(cae__cfg_find_key(key));
	if (idx < 0)
		return cae_error_set(err, -EINVAL, "unknown config key \"%.200s\"", key);
	/* all or nothing: change a copy, validate it, then swap it in */
	cae_config *tmp = cae_config_dup(cfg);
	if (!tmp)
		return cae_error_set(err, -ENOMEM, "out of memory");
	struct cfg_ctx c = {.cfg = tmp, .envp = environ, .err = err};
	int r = cae__cfg_set_from_text(&c, idx, value, strlen(value), NULL, false);
	if (r >= 0) {
		/* keep network mode and external_access consistent with the key just set */
		if (strcmp(cfg_keys[idx].path, CE "docker.network.mode") == 0)
			c.origin[idx].line = 1;
		else if (strcmp(cfg_keys[idx].path, CE "docker.network.external_access") == 0 &&
			 tmp->command_executor.docker.network.external_access &&
			 tmp->command_executor.docker.network.mode == CAE_CONFIG_NETWORK_NONE)
			tmp->command_executor.docker.network.mode = CAE_CONFIG_NETWORK_BRIDGE;
		r = cae__cfg_validate(&c, false);
	}
	if (r < 0) {
		if (r == -ENOMEM)
			cae_error_set(err, r, "out of memory");
		cae_config_free(tmp);
		return r;
	}
	/* swap: cfg gets tmp's contents, tmp (now holding the old ones) is freed */
	cae_config old;
	memcpy(&old, cfg, sizeof(old));
	memcpy(cfg, tmp, sizeof(*cfg));
	memcpy(tmp, &old, sizeof(*tmp));
	cae_config_free(tmp);
	return 0;
}

const char *cae_config_environment_image(const cae_config *cfg, const char *name)
{
	if (!cfg || !name)
		return NULL;
	for (size_t i = 0; i < cfg->command_executor.n_environments; i++)
		if (strcmp(cfg->command_executor.environments[i].name, name) == 0)
			return cfg->command_executor.environments[i].image;
	return NULL;
}

bool cae_config_label_valid(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > 63 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i]))
			return false;
	return true;
}

const char *cae_config_instance(const cae_config *cfg, char *out)
{
	const char *set = cfg->command_executor.instance;
	if (set && cae_config_label_valid(set)) {
		snprintf(out, CAE_CONFIG_INSTANCE_MAX, "%s", set);
		return out;
	}
	/* FNV-1a (64 bits) of the state directory's real path: stable across processes and
	 * spellings of the path, short enough for a label */
	const char *dir = cfg->command_executor.state_dir ? cfg->command_executor.state_dir : "";
	_cleanup_free_ char *real = realpath(dir, NULL);
	const char *p = real ? real : dir;
	uint64_t h = 1469598103934665603ULL;
	for (; *p; p++) {
		h ^= (unsigned char)*p;
		h *= 1099511628211ULL;
	}
	snprintf(out, CAE_CONFIG_INSTANCE_MAX, "s%012llx",
		 (unsigned long long)(h & 0xffffffffffffULL));
	return out;
}

void cae_config_free(cae_config *cfg)
{
	if (!cfg)
		return;
	for (size_t i = 0; i < cfg_nkeys; i++) {
		const struct cfg_key *k = &cfg_keys[i];
		if (k->alias_of)
			continue;
		switch (k->type) {
		case V_STRING:
		case V_MEMSIZE:
			free(*(char **)cae__cfg_field(cfg, k->off));
			break;
		case V_STRLIST:
			cae_config_strlist_clear(cae__cfg_field(cfg, k->off));
			break;
		case V_ENVMAP:
			cae__cfg_envmap_clear(cfg);
			break;
		default:
			break;
		}
	}
	cae_config_strlist_clear(&cfg->warnings);
	free(cfg->source);
	free(cfg);
}
