/* cae_config_to_json(): the effective config with config.yaml's keys (itself a valid
 * config file), secrets and URL credentials redacted on request. */
#include "config/config-internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

/* Replaces the userinfo of a URL ("user:secret" before the last @ of the authority) by ***. */
static char *redact_url_userinfo(const char *s)
{
	const char *sep = strstr(s, "://");
	if (!sep)
		return strdup(s);
	const char *auth = sep + 3;
	size_t alen = strcspn(auth, "/?#");
	const char *at = NULL;
	for (size_t i = 0; i < alen; i++)
		if (auth[i] == '@')
			at = auth + i;
	if (!at)
		return strdup(s);
	size_t head = (size_t)(auth - s);
	size_t n = head + 3 + strlen(at) + 1;
	char *o = malloc(n);
	if (!o)
		return NULL;
	memcpy(o, s, head);
	memcpy(o + head, "***", 3);
	memcpy(o + head + 3, at, strlen(at) + 1);
	return o;
}

static json_t *jstr(const char *s)
{
	if (!s)
		return json_null();
	json_t *j = json_string(s);
	if (!j) /* not UTF-8 (from the environment): show it escaped */
		j = json_stringn_nocheck("(invalid UTF-8)", 15);
	return j;
}

static json_t *parent_object(json_t *root, const char *path, const char **leaf)
{
	json_t *o = root;
	const char *p = path;
	const char *dot;
	while ((dot = strchr(p, '.'))) {
		char part[CFG_MAX_KEY_PATH];
		size_t n = MIN((size_t)(dot - p), sizeof(part) - 1);
		memcpy(part, p, n);
		part[n] = '\0';
		o = json_object_get(o, part);
		if (!o)
			return NULL;
		p = dot + 1;
	}
	*leaf = p;
	return o;
}

static json_t *strlist_json(const cae_config_strlist *l)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < l->n; i++)
		if (json_array_append_new(a, jstr(l->items[i])) < 0) {
			json_decref(a);
			return NULL;
		}
	return a;
}

json_t *cae_config_to_json(const cae_config *cfg, bool redact)
{
	if (!cfg)
		return NULL;
	json_t *root = json_object();
	if (!root)
		return NULL;
	for (size_t i = 0; i < cfg_nkeys; i++) {
		const struct cfg_key *k = &cfg_keys[i];
		if (k->alias_of)
			continue;
		const char *leaf;
		json_t *parent = parent_object(root, k->path, &leaf);
		json_t *v = NULL;
		if (!parent)
			goto fail;
		switch (k->type) {
		case V_SECTION:
			v = json_object();
			break;
		case V_BOOL:
			v = json_boolean(*(const bool *)cae__cfg_cfield(cfg, k->off));
			break;
		case V_INT:
			v = json_integer(*(const int *)cae__cfg_cfield(cfg, k->off));
			break;
		case V_SIZE:
			v = json_integer((json_int_t) *
					 (const uint64_t *)cae__cfg_cfield(cfg, k->off));
			break;
		case V_DOUBLE:
			v = json_real(*(const double *)cae__cfg_cfield(cfg, k->off));
			break;
		case V_MEMSIZE:
			v = jstr(*(char *const *)cae__cfg_cfield(cfg, k->off));
			break;
		case V_STRING: {
			const char *s = *(char *const *)cae__cfg_cfield(cfg, k->off);
			if (redact && s && (k->flags & F_SECRET)) {
				v = json_string("***");
			} else if (redact && s && (k->flags & F_URL)) {
				char *r = redact_url_userinfo(s);
				if (!r)
					goto fail;
				v = jstr(r);
				free(r);
			} else {
				v = jstr(s);
			}
			break;
		}
		case V_ENUM:
			v = json_string(k->names[*(const int *)cae__cfg_cfield(cfg, k->off)]);
			break;
		case V_STRLIST:
			v = strlist_json(cae__cfg_cfield(cfg, k->off));
			break;
		case V_ENVMAP:
			v = json_object();
			for (size_t j = 0; v && j < cfg->command_executor.n_environments; j++)
				if (json_object_set_new(
					v, cfg->command_executor.environments[j].name,
					jstr(cfg->command_executor.environments[j].image)) < 0) {
					json_decref(v);
					v = NULL;
				}
			break;
		}
		if (!v || json_object_set_new(parent, leaf, v) < 0)
			goto fail;
	}
	return root;
fail:
	json_decref(root);
	return NULL;
}
