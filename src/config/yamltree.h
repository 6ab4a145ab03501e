/* Internal to the config module: a YAML document read into a small tree with bounds.
 *
 * libyaml's event parser feeds a node arena (indices, so an alias simply refers to an earlier
 * node; nothing is expanded). Nesting depth, node count and anchor count are bounded, and
 * exactly one document is accepted.
 */
#ifndef CAE_CONFIG_YAMLTREE_H
#define CAE_CONFIG_YAMLTREE_H

#include <stdbool.h>
#include <stddef.h>

#define CFG_YAML_MAX_NODES 200000
#define CFG_YAML_MAX_ANCHORS 256

typedef enum cfg_ynode_type {
	CFG_YSCALAR,
	CFG_YSEQ,
	CFG_YMAP, /* items are key, value, key, value, ... */
} cfg_ynode_type;

typedef struct cfg_ynode {
	cfg_ynode_type type;
	int line;    /* 1-based line of the node's start */
	bool plain;  /* scalar written without quotes (for null detection) */
	char *value; /* scalar text, NUL-terminated (may contain NULs: see len) */
	size_t len;
	size_t *items; /* node indices */
	size_t n, cap;
} cfg_ynode;

typedef struct cfg_ydoc {
	cfg_ynode *nodes;
	size_t n, cap;
	bool has_root; /* false for an empty stream */
	size_t root;
} cfg_ydoc;

/* Parses len bytes. Returns 0, -ENOMEM, or -EINVAL with *line (1-based, 0 when unknown)
 * and msg (a description without the file name) set. */
int cae__cfg_yaml_parse(const char *text, size_t len, int max_depth, cfg_ydoc *doc, int *line,
			char *msg, size_t msg_size);
void cae__cfg_ydoc_free(cfg_ydoc *doc);

/* True for a plain scalar that YAML reads as null: "", "~", "null", "Null", "NULL". */
bool cae__cfg_ynode_is_null(const cfg_ynode *n);

#endif
