/* cae_config_reference(): every key of the schema (schema.c) with what the schema says of it
 * (type, bounds, default, environment variable, aliases) and what it means (schema-doc.c).
 * `cae config reference` renders it as docs/config.md. */
#include "config/config-internal.h"

#include <errno.h>
#include <string.h>

#include "base/banned.h"

static const char *doc_of(const char *path)
{
	for (size_t i = 0; i < cfg_ndocs; i++)
		if (strcmp(cfg_docs[i].path, path) == 0)
			return cfg_docs[i].text;
	return NULL;
}

static const char *type_name(enum cfg_vtype t)
{
	switch (t) {
	case V_SECTION:
		return "section";
	case V_BOOL:
		return "boolean";
	case V_INT:
		return "integer";
	case V_SIZE:
	case V_MEMSIZE:
		return "size";
	case V_DOUBLE:
		return "number";
	case V_STRING:
		return "string";
	case V_ENUM:
		return "enum";
	case V_STRLIST:
		return "list";
	case V_ENVMAP:
		return "map";
	}
	return "?";
}

/* The default as JSON: lists and maps from their comma-separated text form. */
static json_t *default_of(const struct cfg_key *k)
{
	if (k->type == V_STRLIST || k->type == V_ENVMAP) {
		json_t *v = k->type == V_STRLIST ? json_array() : json_object();
		for (const char *p = k->def; p && *p;) {
			size_t n = strcspn(p, ",");
			if (k->type == V_STRLIST) {
				json_array_append_new(v, json_stringn(p, n));
			} else {
				const char *eq = memchr(p, '=', n);
				if (eq) {
					char name[CFG_MAX_ENV_NAME + 1];
					size_t nl = (size_t)(eq - p) < CFG_MAX_ENV_NAME
							? (size_t)(eq - p)
							: CFG_MAX_ENV_NAME;
					memcpy(name, p, nl);
					name[nl] = '\0';
					json_object_set_new(v, name,
							    json_stringn(eq + 1, n - nl - 1));
				}
			}
			p += n + (p[n] == ',');
		}
		return v;
	}
	return k->def ? json_string(k->def) : json_null();
}

int cae_config_reference(json_t **out, cae_error *err)
{
	json_t *keys = json_array();
	if (!keys)
		return cae_error_set(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < cfg_nkeys; i++) {
		const struct cfg_key *k = &cfg_keys[i];
		if (k->alias_of)
			continue;
		const char *doc = doc_of(k->path);
		if (!doc) {
			json_decref(keys);
			return cae_error_set(err, -EINVAL,
					     "%s: no reference text (src/config/schema-doc.c)",
					     k->path);
		}
		json_t *e = json_pack("{s:s, s:s, s:s}", "key", k->path, "type", type_name(k->type),
				      "description", doc);
		if (!e || json_array_append_new(keys, e) < 0) {
			json_decref(keys);
			return cae_error_set(err, -ENOMEM, "out of memory");
		}
		if (k->type == V_SECTION)
			continue;
		json_object_set_new(e, "default", default_of(k));
		json_object_set_new(e, "env", k->env ? json_string(k->env) : json_null());
		if (k->type == V_INT || k->type == V_SIZE || k->type == V_MEMSIZE) {
			json_object_set_new(e, "min", json_integer(k->min));
			json_object_set_new(e, "max", json_integer(k->max));
		} else if (k->type == V_DOUBLE) {
			json_object_set_new(e, "min", json_real(0.01));
			json_object_set_new(e, "max", json_integer(k->max));
		}
		if (k->type == V_ENUM) {
			json_t *v = json_array();
			for (size_t n = 0; k->names[n]; n++)
				json_array_append_new(v, json_string(k->names[n]));
			json_object_set_new(e, "values", v);
		}
		json_t *aliases = json_array();
		for (size_t j = 0; j < cfg_nkeys; j++)
			if (cfg_keys[j].alias_of && strcmp(cfg_keys[j].alias_of, k->path) == 0)
				json_array_append_new(aliases, json_string(cfg_keys[j].path));
		json_object_set_new(e, "aliases", aliases);
		json_object_set_new(e, "secret", json_boolean(k->flags & F_SECRET));
		json_object_set_new(e, "absolute_path", json_boolean(k->flags & F_ABSPATH));
	}
	/* a text for a key the schema does not have is a key renamed or removed */
	for (size_t i = 0; i < cfg_ndocs; i++)
		if (cae__cfg_find_key(cfg_docs[i].path) < 0) {
			json_decref(keys);
			return cae_error_set(
			    err, -EINVAL, "%s: reference text for a key the schema does not have",
			    cfg_docs[i].path);
		}
	*out = keys;
	return 0;
}
