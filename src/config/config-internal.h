/* Internal to src/config: the key table that drives the whole module (schema.c), the context
 * of one load or cae_config_set(), and the helpers the module's files share.
 *
 * The files, in the order a load runs them:
 *   schema.c    the table of keys: path, type, field, bounds, environment variable, default
 *   config.c    the lifecycle: defaults, finding and reading the file, load, dup, set, free
 *   yaml.c      config.yaml walked against the table (yamltree.c reads the YAML)
 *   env.c       environment variables over the file
 *   set.c       one key stored from its text form, with the owned strings, lists and map
 *   value.c     the value syntax (booleans, sizes, ...) and the messages about bad values
 *   validate.c  rules across keys, after every load and every cae_config_set()
 *   json.c      cae_config_to_json(), secrets redacted on request
 *   schema-doc.c  what each key means, and reference.c the reference built from both tables
 */
#ifndef CAE_CONFIG_INTERNAL_H
#define CAE_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/macro.h"
#include "cae/config.h"
#include "config/yamltree.h"

#define CFG_MAX_WARNINGS 100
#define CFG_MAX_LIST_ITEMS 4096
#define CFG_MAX_ENVIRONMENTS 64
#define CFG_MAX_ENV_NAME 63
#define CFG_MAX_KEY_PATH 256
#define CFG_MAX_KEYS 128 /* the table's size is checked against it (schema.c) */
#define CE "command_executor."
#define TE "text_editor_mcp."
#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)
#define TiB (1024ull * GiB)

enum cfg_vtype {
	V_SECTION,
	V_BOOL,
	V_INT,	   /* int, bounded by min/max */
	V_SIZE,	   /* uint64_t bytes, bounded */
	V_MEMSIZE, /* char * as written + uint64_t bytes at off2, bounded */
	V_DOUBLE,  /* double, from 0.01 to max; decimal notation, 9 fraction digits */
	V_STRING,  /* char * */
	V_ENUM,	   /* an enum stored as int; names[] */
	V_STRLIST, /* cae_config_strlist */
	V_ENVMAP,  /* command_executor.environments */
};

#define F_SECRET 1u   /* never shown: "***" in redacted JSON, "(hidden)" in messages */
#define F_NONEMPTY 2u /* the empty string is refused */
#define F_ABSPATH 4u  /* "~/" expanded, then an absolute path is required */
#define F_URL 8u      /* credentials in the URL are redacted in redacted JSON */
#define F_LABEL 16u   /* a label value: 1-63 of [A-Za-z0-9._-], alphanumeric at both ends */
#define F_LINE 32u    /* one line of text: no control characters */

struct cfg_key {
	const char *path;
	enum cfg_vtype type;
	size_t off;
	size_t off2;
	long long min, max;
	const char *const *names;
	const char *env;
	unsigned flags;
	const char *def;      /* default in text form (cae_config_set syntax), NULL = none */
	const char *alias_of; /* an alternative spelling of that key */
};

/* The table (schema.c). A section comes before its keys (to_json builds objects in this
 * order). */
extern const struct cfg_key cfg_keys[];
extern const size_t cfg_nkeys;

/* The reference text of the keys and sections (schema-doc.c): what each one means. */
struct cfg_doc {
	const char *path;
	const char *text;
};
extern const struct cfg_doc cfg_docs[];
extern const size_t cfg_ndocs;

/* The index of a key by its dotted path, -1 if unknown. */
int cae__cfg_find_key(const char *path);
/* The key an alias stands for (idx itself for other keys; -1 stays -1). */
int cae__cfg_canonical(int idx);

static inline void *cae__cfg_field(cae_config *cfg, size_t off)
{
	return (char *)cfg + off;
}

static inline const void *cae__cfg_cfield(const cae_config *cfg, size_t off)
{
	return (const char *)cfg + off;
}

/* Where a value came from, for messages. */
struct cfg_where {
	const char *file; /* with line > 0 */
	int line;
	const char *env; /* an environment variable */
};

/* One load or cae_config_set(). Everything is borrowed. */
struct cfg_ctx {
	cae_config *cfg;
	char *const *envp;
	cae_error *err;
	const char *file;
	const cfg_ydoc *doc;
	bool seen[CFG_MAX_KEYS]; /* given in the file */
	struct cfg_where
	    origin[CFG_MAX_KEYS]; /* where the effective value was set (zero: default) */
};

/* ---- value.c: syntax and messages ---- */

int cae__cfg_parse_ll(const char *s, long long *out);
int cae__cfg_parse_positive_double(const char *s, double *out);
/* Trims blanks and line ends in place; returns the first character kept. */
const char *cae__cfg_trim(char *s);
/* A bounded, escaped rendering of a value for messages: "\"...\"". */
void cae__cfg_show_value(char *buf, size_t size, const char *s, size_t len);
/* What the key expects, for messages (buf may be used for the text). */
const char *cae__cfg_expected(const struct cfg_key *k, char *buf, size_t size);
/* Sets c->err to "<where>: <key path>: <message>" and returns -EINVAL. w may be NULL. */
int cae__cfg_key_error(struct cfg_ctx *c, const struct cfg_where *w, int idx, const char *fmt, ...)
    _printf_(4, 5);
/* cae__cfg_key_error with what the key expects and the value given (hidden for secrets). */
int cae__cfg_bad_value(struct cfg_ctx *c, const struct cfg_where *w, int idx, const char *got,
		       size_t len);
/* Appends a line to cfg->warnings (at most CFG_MAX_WARNINGS, then one "omitted" line). */
int cae__cfg_add_warning(cae_config *cfg, const char *fmt, ...) _printf_(2, 3);

/* ---- set.c: storing values ---- */

int cae__cfg_strlist_push(cae_config_strlist *l, const char *s, size_t len);
/* Replaces the string field at off by a copy of s (NULL: none). */
int cae__cfg_set_string(cae_config *cfg, size_t off, const char *s);
/* Appends one list item (NUL-terminated, trimmed), "~/"-expanded and required absolute for
 * F_ABSPATH lists. */
int cae__cfg_list_push_item(struct cfg_ctx *c, const struct cfg_where *w, int idx,
			    cae_config_strlist *l, const char *t);
/* The environments map: one being built (map, n) gets name -> image appended, refusing
 * duplicates and bad names; install replaces cfg's map by it (stolen); free drops it. */
int cae__cfg_envmap_push(struct cfg_ctx *c, const struct cfg_where *w, int idx,
			 cae_config_environment **map, size_t *n, const char *name, size_t name_len,
			 const char *image, size_t image_len);
void cae__cfg_envmap_free(cae_config_environment *map, size_t n);
void cae__cfg_envmap_install(cae_config *cfg, cae_config_environment *map, size_t n);
void cae__cfg_envmap_clear(cae_config *cfg);
/* Sets key idx from its text form (yaml: a scalar of the file, where lists and maps are not
 * accepted as text). */
int cae__cfg_set_from_text(struct cfg_ctx *c, int idx, const char *text, size_t len,
			   const struct cfg_where *w, bool yaml);

/* ---- yaml.c, env.c, validate.c ---- */

/* Applies the YAML document text[0..len) (c->file names it in messages). */
int cae__cfg_apply_yaml(struct cfg_ctx *c, const char *text, size_t len);
/* The value of an environment variable in envp, NULL when unset or empty. */
const char *cae__cfg_env_get(char *const *envp, const char *name);
/* Applies the keys' environment variables of c->envp. */
int cae__cfg_apply_env(struct cfg_ctx *c);
/* The default state_dir for envp (new string, NULL on ENOMEM). */
char *cae__cfg_default_state_dir(char *const *envp);
/* Checks (and completes, for the network mode) what keys say together; warn adds the
 * warnings of a load. */
int cae__cfg_validate(struct cfg_ctx *c, bool warn);

#endif
