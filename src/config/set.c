/* Storing one key's value from its text form (a scalar of the file, an environment
 * variable, cae_config_set()) into the config's field, with the strings, lists and the
 * environments map the config owns. */
#include "config/config-internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/fs.h"
#include "base/banned.h"

void cae_config_strlist_clear(cae_config_strlist *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		free(l->items[i]);
	free(l->items);
	l->items = NULL;
	l->n = 0;
}

int cae__cfg_strlist_push(cae_config_strlist *l, const char *s, size_t len)
{
	char **items = realloc(l->items, (l->n + 1) * sizeof(*items));
	if (!items)
		return -ENOMEM;
	l->items = items;
	l->items[l->n] = strndup(s, len);
	if (!l->items[l->n])
		return -ENOMEM;
	l->n++;
	return 0;
}

void cae__cfg_envmap_clear(cae_config *cfg)
{
	for (size_t i = 0; i < cfg->command_executor.n_environments; i++) {
		free(cfg->command_executor.environments[i].name);
		free(cfg->command_executor.environments[i].image);
	}
	free(cfg->command_executor.environments);
	cfg->command_executor.environments = NULL;
	cfg->command_executor.n_environments = 0;
}

static bool valid_env_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > CFG_MAX_ENV_NAME)
		return false;
	if (!islower((unsigned char)s[0]) && !isdigit((unsigned char)s[0]))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!islower((unsigned char)s[i]) && !isdigit((unsigned char)s[i]) && s[i] != '_' &&
		    s[i] != '.' && s[i] != '-')
			return false;
	return true;
}

int cae__cfg_envmap_push(struct cfg_ctx *c, const struct cfg_where *w, int idx,
			 cae_config_environment **map, size_t *n, const char *name, size_t name_len,
			 const char *image, size_t image_len)
{
	char vbuf[128];
	if (memchr(name, '\0', name_len) || !valid_env_name(name)) {
		cae__cfg_show_value(vbuf, sizeof(vbuf), name, name_len);
		return cae__cfg_key_error(
		    c, w, idx,
		    "invalid environment name %s (lower-case letters, digits, '_', '.', "
		    "'-', at most %d characters)",
		    vbuf, CFG_MAX_ENV_NAME);
	}
	if (image_len == 0 || memchr(image, '\0', image_len))
		return cae__cfg_key_error(c, w, idx,
					  "environment %s: expected a non-empty image name", name);
	for (size_t i = 0; i < *n; i++)
		if (strcmp((*map)[i].name, name) == 0)
			return cae__cfg_key_error(c, w, idx, "environment %s given twice", name);
	if (*n >= CFG_MAX_ENVIRONMENTS)
		return cae__cfg_key_error(c, w, idx, "more than %d environments",
					  CFG_MAX_ENVIRONMENTS);
	cae_config_environment *m = realloc(*map, (*n + 1) * sizeof(**map));
	if (!m)
		return -ENOMEM;
	*map = m;
	m[*n].name = strndup(name, name_len);
	m[*n].image = strndup(image, image_len);
	if (!m[*n].name || !m[*n].image) {
		free(m[*n].name);
		free(m[*n].image);
		return -ENOMEM;
	}
	(*n)++;
	return 0;
}

void cae__cfg_envmap_free(cae_config_environment *map, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(map[i].name);
		free(map[i].image);
	}
	free(map);
}

void cae__cfg_envmap_install(cae_config *cfg, cae_config_environment *map, size_t n)
{
	cae__cfg_envmap_clear(cfg);
	cfg->command_executor.environments = map;
	cfg->command_executor.n_environments = n;
}

int cae__cfg_set_string(cae_config *cfg, size_t off, const char *s)
{
	char **f = cae__cfg_field(cfg, off);
	char *copy = NULL;
	if (s) {
		copy = strdup(s);
		if (!copy)
			return -ENOMEM;
	}
	free(*f);
	*f = copy;
	return 0;
}

static char *expand_home(struct cfg_ctx *c, const char *s)
{
	if (s[0] == '~' && (s[1] == '/' || s[1] == '\0')) {
		const char *home = cae__cfg_env_get(c->envp, "HOME");
		if (home)
			return cae__path_join(home, s[1] ? s + 2 : "");
	}
	return strdup(s);
}

int cae__cfg_list_push_item(struct cfg_ctx *c, const struct cfg_where *w, int idx,
			    cae_config_strlist *l, const char *t)
{
	if (!(cfg_keys[idx].flags & F_ABSPATH))
		return cae__cfg_strlist_push(l, t, strlen(t));
	_cleanup_free_ char *p = expand_home(c, t);
	if (!p)
		return -ENOMEM;
	if (p[0] != '/') {
		char vbuf[128];
		cae__cfg_show_value(vbuf, sizeof(vbuf), t, strlen(t));
		return cae__cfg_key_error(c, w, idx, "expected absolute paths, got %s", vbuf);
	}
	return cae__cfg_strlist_push(l, p, strlen(p));
}

int cae__cfg_set_from_text(struct cfg_ctx *c, int idx, const char *text, size_t len,
			   const struct cfg_where *w, bool yaml)
{
	const struct cfg_key *k = &cfg_keys[idx];
	cae_config *cfg = c->cfg;
	int r;

	if (memchr(text, '\0', len))
		return cae__cfg_key_error(c, w, idx, "%s, got a value containing a NUL byte",
					  cae__cfg_expected(k, (char[128]){0}, 128));
	_cleanup_free_ char *copy = strndup(text, len);
	if (!copy)
		return -ENOMEM;

	switch (k->type) {
	case V_SECTION:
		return cae__cfg_key_error(c, w, idx, "is a section, expected a mapping");
	case V_BOOL: {
		bool b;
		if (cae_config_parse_bool(cae__cfg_trim(copy), &b) < 0)
			return cae__cfg_bad_value(c, w, idx, text, len);
		*(bool *)cae__cfg_field(cfg, k->off) = b;
		break;
	}
	case V_INT: {
		long long v;
		if (cae__cfg_parse_ll(cae__cfg_trim(copy), &v) < 0)
			return cae__cfg_bad_value(c, w, idx, text, len);
		if (v < k->min || v > k->max) {
			char vbuf[128];
			cae__cfg_show_value(vbuf, sizeof(vbuf), text, len);
			return cae__cfg_key_error(c, w, idx,
						  "expected an integer from %lld to %lld, got %s",
						  k->min, k->max, vbuf);
		}
		*(int *)cae__cfg_field(cfg, k->off) = (int)v;
		break;
	}
	case V_SIZE:
	case V_MEMSIZE: {
		uint64_t v;
		const char *t = cae__cfg_trim(copy);
		if (cae_config_parse_size(t, &v) < 0)
			return cae__cfg_bad_value(c, w, idx, text, len);
		if (v < (uint64_t)k->min || v > (uint64_t)k->max) {
			char vbuf[128];
			cae__cfg_show_value(vbuf, sizeof(vbuf), text, len);
			return cae__cfg_key_error(
			    c, w, idx,
			    "expected a size from %lld to %lld bytes, got %s (%llu bytes)", k->min,
			    k->max, vbuf, (unsigned long long)v);
		}
		if (k->type == V_MEMSIZE) {
			r = cae__cfg_set_string(cfg, k->off, t);
			if (r < 0)
				return r;
			*(uint64_t *)cae__cfg_field(cfg, k->off2) = v;
		} else {
			*(uint64_t *)cae__cfg_field(cfg, k->off) = v;
		}
		break;
	}
	case V_DOUBLE: {
		double v;
		if (cae__cfg_parse_positive_double(cae__cfg_trim(copy), &v) < 0)
			return cae__cfg_bad_value(c, w, idx, text, len);
		if (v < 0.01 || v > (double)k->max) {
			char vbuf[128];
			cae__cfg_show_value(vbuf, sizeof(vbuf), text, len);
			return cae__cfg_key_error(
			    c, w, idx, "expected a number from 0.01 to %lld, got %s", k->max, vbuf);
		}
		*(double *)cae__cfg_field(cfg, k->off) = v;
		break;
	}
	case V_STRING: {
		if ((k->flags & F_NONEMPTY) && len == 0)
			return cae__cfg_key_error(c, w, idx, "expected a non-empty string");
		if (k->flags & F_LINE)
			for (size_t i = 0; i < len; i++)
				if ((unsigned char)text[i] < 0x20 || text[i] == 0x7f)
					return cae__cfg_key_error(
					    c, w, idx,
					    "expected one line of text, without control "
					    "characters");
		if (k->flags & F_ABSPATH) {
			_cleanup_free_ char *p = expand_home(c, copy);
			if (!p)
				return -ENOMEM;
			if (p[0] != '/') {
				char vbuf[128];
				cae__cfg_show_value(vbuf, sizeof(vbuf), text, len);
				return cae__cfg_key_error(
				    c, w, idx, "expected an absolute path, got %s", vbuf);
			}
			return cae__cfg_set_string(cfg, k->off, p);
		}
		if ((k->flags & F_LABEL) && !cae_config_label_valid(copy)) {
			char vbuf[128];
			cae__cfg_show_value(vbuf, sizeof(vbuf), text, len);
			return cae__cfg_key_error(c, w, idx,
						  "expected 1 to 63 of A-Z a-z 0-9 . _ -, starting "
						  "and ending with a letter or digit, got %s",
						  vbuf);
		}
		return cae__cfg_set_string(cfg, k->off, copy);
	}
	case V_ENUM: {
		const char *t = cae__cfg_trim(copy);
		for (int i = 0; k->names[i]; i++)
			if (strcasecmp(t, k->names[i]) == 0) {
				*(int *)cae__cfg_field(cfg, k->off) = i;
				return 0;
			}
		return cae__cfg_bad_value(c, w, idx, text, len);
	}
	case V_STRLIST: {
		if (yaml)
			return cae__cfg_bad_value(c, w, idx, text, len);
		cae_config_strlist l = {0};
		char *save = NULL;
		for (char *tok = strtok_r(copy, ",", &save); tok;
		     tok = strtok_r(NULL, ",", &save)) {
			const char *t = cae__cfg_trim(tok);
			if (!*t)
				continue;
			if (l.n >= CFG_MAX_LIST_ITEMS) {
				cae_config_strlist_clear(&l);
				return cae__cfg_key_error(c, w, idx, "more than %d items",
							  CFG_MAX_LIST_ITEMS);
			}
			r = cae__cfg_list_push_item(c, w, idx, &l, t);
			if (r < 0) {
				cae_config_strlist_clear(&l);
				return r;
			}
		}
		cae_config_strlist *f = cae__cfg_field(cfg, k->off);
		cae_config_strlist_clear(f);
		*f = l;
		break;
	}
	case V_ENVMAP: {
		if (yaml)
			return cae__cfg_bad_value(c, w, idx, text, len);
		cae_config_environment *map = NULL;
		size_t n = 0;
		char *save = NULL;
		for (char *tok = strtok_r(copy, ",", &save); tok;
		     tok = strtok_r(NULL, ",", &save)) {
			char *t = (char *)cae__cfg_trim(tok);
			if (!*t)
				continue;
			char *eq = strchr(t, '=');
			if (!eq) {
				cae__cfg_envmap_free(map, n);
				char vbuf[128];
				cae__cfg_show_value(vbuf, sizeof(vbuf), t, strlen(t));
				return cae__cfg_key_error(c, w, idx, "expected name=image, got %s",
							  vbuf);
			}
			*eq = '\0';
			const char *name = cae__cfg_trim(t), *image = cae__cfg_trim(eq + 1);
			r = cae__cfg_envmap_push(c, w, idx, &map, &n, name, strlen(name), image,
						 strlen(image));
			if (r < 0) {
				cae__cfg_envmap_free(map, n);
				return r;
			}
		}
		cae__cfg_envmap_install(cfg, map, n);
		break;
	}
	}
	return 0;
}
