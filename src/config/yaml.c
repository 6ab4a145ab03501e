/* config.yaml walked against the key table: sections, scalars, lists and the environments
 * map; an unknown key is a warning, a key given twice an error. The YAML itself is read
 * by yamltree.c. */
#include "config/config-internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

static const char *node_kind(const cfg_ynode *n)
{
	switch (n->type) {
	case CFG_YSEQ:
		return "a sequence";
	case CFG_YMAP:
		return "a mapping";
	case CFG_YSCALAR:
		break;
	}
	return "a scalar";
}

static int set_from_node(struct cfg_ctx *c, int idx, size_t node, int key_line)
{
	const struct cfg_key *k = &cfg_keys[idx];
	const cfg_ynode *v = &c->doc->nodes[node];
	struct cfg_where w = {.file = c->file, .line = key_line};
	int r;

	if (cae__cfg_ynode_is_null(v)) {
		if (k->type == V_STRLIST)
			cae_config_strlist_clear(cae__cfg_field(c->cfg, k->off));
		else if (k->type == V_ENVMAP)
			cae__cfg_envmap_clear(c->cfg);
		return 0;
	}
	if (v->type == CFG_YSCALAR)
		return cae__cfg_set_from_text(c, idx, v->value, v->len, &w, true);

	char ebuf[256];
	if (k->type == V_STRLIST && v->type == CFG_YSEQ) {
		cae_config_strlist l = {0};
		for (size_t i = 0; i < v->n; i++) {
			const cfg_ynode *it = &c->doc->nodes[v->items[i]];
			struct cfg_where iw = {.file = c->file, .line = it->line};
			if (i >= CFG_MAX_LIST_ITEMS)
				r = cae__cfg_key_error(c, &iw, idx, "more than %d items",
						       CFG_MAX_LIST_ITEMS);
			else if (it->type != CFG_YSCALAR || cae__cfg_ynode_is_null(it))
				r = cae__cfg_key_error(
				    c, &iw, idx, "item %zu: expected a string, got %s", i + 1,
				    cae__cfg_ynode_is_null(it) ? "null" : node_kind(it));
			else if (it->len == 0 || memchr(it->value, '\0', it->len))
				r = cae__cfg_key_error(
				    c, &iw, idx,
				    "item %zu: expected a non-empty string without NUL bytes",
				    i + 1);
			else if (cfg_keys[idx].flags & F_ABSPATH) {
				_cleanup_free_ char *t = strndup(it->value, it->len);
				r = t ? cae__cfg_list_push_item(c, &iw, idx, &l, t) : -ENOMEM;
			} else
				r = cae__cfg_strlist_push(&l, it->value, it->len);
			if (r < 0) {
				cae_config_strlist_clear(&l);
				return r;
			}
		}
		cae_config_strlist *f = cae__cfg_field(c->cfg, k->off);
		cae_config_strlist_clear(f);
		*f = l;
		return 0;
	}
	if (k->type == V_ENVMAP && v->type == CFG_YMAP) {
		cae_config_environment *map = NULL;
		size_t n = 0;
		for (size_t i = 0; i + 1 < v->n; i += 2) {
			const cfg_ynode *kn = &c->doc->nodes[v->items[i]];
			const cfg_ynode *vn = &c->doc->nodes[v->items[i + 1]];
			struct cfg_where iw = {.file = c->file, .line = kn->line};
			if (kn->type != CFG_YSCALAR || vn->type != CFG_YSCALAR)
				r = cae__cfg_key_error(c, &iw, idx, "%s",
						       cae__cfg_expected(k, ebuf, sizeof(ebuf)));
			else if (cae__cfg_ynode_is_null(vn))
				r = cae__cfg_envmap_push(c, &iw, idx, &map, &n, kn->value, kn->len,
							 "", 0);
			else
				r = cae__cfg_envmap_push(c, &iw, idx, &map, &n, kn->value, kn->len,
							 vn->value, vn->len);
			if (r < 0) {
				cae__cfg_envmap_free(map, n);
				return r;
			}
		}
		cae__cfg_envmap_install(c->cfg, map, n);
		return 0;
	}
	return cae__cfg_key_error(c, &w, idx, "%s, got %s",
				  cae__cfg_expected(k, ebuf, sizeof(ebuf)), node_kind(v));
}

static int walk_map(struct cfg_ctx *c, size_t node, const char *prefix)
{
	const cfg_ynode *m = &c->doc->nodes[node];
	int r;
	for (size_t i = 0; i + 1 < m->n; i += 2) {
		size_t kidx = m->items[i], vidx = m->items[i + 1];
		const cfg_ynode *k = &c->doc->nodes[kidx];
		char path[CFG_MAX_KEY_PATH];
		int idx = -1;
		if (k->type != CFG_YSCALAR) {
			r = cae__cfg_add_warning(
			    c->cfg, "%s:%d: a key in %s is %s, not a string (ignored)", c->file,
			    k->line, *prefix ? prefix : "the top level", node_kind(k));
			if (r < 0)
				return r;
			continue;
		}
		int n =
		    snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "." : "", k->value);
		if (n > 0 && (size_t)n < sizeof(path) && !memchr(k->value, '\0', k->len))
			idx = cae__cfg_find_key(path);
		if (idx < 0) {
			char shown[160];
			cae__cfg_show_value(shown, sizeof(shown), path,
					    strnlen(path, sizeof(path)));
			r = cae__cfg_add_warning(c->cfg, "%s:%d: unknown key %s (ignored)", c->file,
						 k->line, shown);
			if (r < 0)
				return r;
			continue;
		}
		int canon = cae__cfg_canonical(idx);
		struct cfg_where w = {.file = c->file, .line = k->line};
		if (c->seen[canon]) {
			if (canon != idx)
				return cae__cfg_key_error(c, &w, idx, "given twice (also as %s)",
							  cfg_keys[canon].path);
			return cae__cfg_key_error(c, &w, idx, "given twice");
		}
		c->seen[canon] = true;
		c->origin[canon] = w;
		if (cfg_keys[canon].type == V_SECTION) {
			const cfg_ynode *v = &c->doc->nodes[vidx];
			if (cae__cfg_ynode_is_null(v))
				continue;
			if (v->type != CFG_YMAP)
				return cae__cfg_key_error(c, &w, idx, "expected a mapping, got %s",
							  node_kind(v));
			r = walk_map(c, vidx, cfg_keys[canon].path);
		} else {
			r = set_from_node(c, canon, vidx, k->line);
		}
		if (r < 0)
			return r;
	}
	return 0;
}

int cae__cfg_apply_yaml(struct cfg_ctx *c, const char *text, size_t len)
{
	cfg_ydoc doc;
	int line = 0;
	char msg[512];
	int r = cae__cfg_yaml_parse(text, len, CAE_CONFIG_MAX_DEPTH, &doc, &line, msg, sizeof(msg));
	if (r == -ENOMEM)
		return cae_error_set(c->err, r, "%s: out of memory", c->file);
	if (r < 0) {
		if (line > 0)
			return cae_error_set(c->err, r, "%s:%d: %s", c->file, line, msg);
		return cae_error_set(c->err, r, "%s: %s", c->file, msg);
	}
	c->doc = &doc;
	if (doc.has_root) {
		const cfg_ynode *root = &doc.nodes[doc.root];
		if (root->type == CFG_YMAP)
			r = walk_map(c, doc.root, "");
		else if (!cae__cfg_ynode_is_null(root))
			r = cae_error_set(
			    c->err, -EINVAL,
			    "%s:%d: expected a mapping of keys at the top level, got %s", c->file,
			    root->line, node_kind(root));
	}
	c->doc = NULL;
	cae__cfg_ydoc_free(&doc);
	return r;
}
