/* The config: one table of keys (path, type, field, bounds, environment variable, default)
 * drives defaults, the YAML walk, environment overrides, cae_config_set(), to_json() and
 * free(), so a new key is one line here and one field in cae/config.h. */
#include "cae/config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "base/macro.h"
#include "config/yamltree.h"
#include "base/banned.h"

extern char **environ;

#define MAX_WARNINGS 100
#define MAX_LIST_ITEMS 4096
#define MAX_ENVIRONMENTS 64
#define MAX_ENV_NAME 63
#define MAX_KEY_PATH 256
#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)
#define TiB (1024ull * GiB)

enum vtype {
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

struct key {
	const char *path;
	enum vtype type;
	size_t off;
	size_t off2;
	long long min, max;
	const char *const *names;
	const char *env;
	unsigned flags;
	const char *def;      /* default in text form (cae_config_set syntax), NULL = none */
	const char *alias_of; /* an alternative spelling of that key */
};

static const char *const backend_names[] = {"auto", "docker", "local", NULL};
static const char *const netmode_names[] = {"bridge", "none", "host", NULL};
static const char *const truncate_names[] = {"head", "head_tail", NULL};
static const char *const sandbox_names[] = {"auto", "bubblewrap", "none", NULL};
static const char *const editor_names[] = {"native", "mcp", NULL};

#define OFF(m) offsetof(cae_config, m)
#define SECTION(p)                                                                                 \
	{                                                                                          \
		.path = p, .type = V_SECTION                                                       \
	}
#define BOOL(p, m, d, e)                                                                           \
	{                                                                                          \
		.path = p, .type = V_BOOL, .off = OFF(m), .def = d, .env = e                       \
	}
#define INT(p, m, lo, hi, d, e)                                                                    \
	{                                                                                          \
		.path = p, .type = V_INT, .off = OFF(m), .min = lo, .max = hi, .def = d, .env = e  \
	}
#define SIZE(p, m, lo, hi, d)                                                                      \
	{                                                                                          \
		.path = p, .type = V_SIZE, .off = OFF(m), .min = lo, .max = hi, .def = d           \
	}
#define MEMSIZE(p, m, m2, lo, hi, d, e)                                                            \
	{                                                                                          \
		.path = p, .type = V_MEMSIZE, .off = OFF(m), .off2 = OFF(m2), .min = lo,           \
		.max = hi, .def = d, .env = e                                                      \
	}
#define DOUBLE(p, m, hi, d, e)                                                                     \
	{                                                                                          \
		.path = p, .type = V_DOUBLE, .off = OFF(m), .max = hi, .def = d, .env = e          \
	}
#define STR(p, m, fl, d, e)                                                                        \
	{                                                                                          \
		.path = p, .type = V_STRING, .off = OFF(m), .flags = fl, .def = d, .env = e        \
	}
#define ENUM(p, m, nm, d, e)                                                                       \
	{                                                                                          \
		.path = p, .type = V_ENUM, .off = OFF(m), .names = nm, .def = d, .env = e          \
	}
#define LIST(p, m, d)                                                                              \
	{                                                                                          \
		.path = p, .type = V_STRLIST, .off = OFF(m), .def = d                              \
	}
#define LISTF(p, m, fl, d)                                                                         \
	{                                                                                          \
		.path = p, .type = V_STRLIST, .off = OFF(m), .flags = fl, .def = d                 \
	}
#define ALIAS(p, of)                                                                               \
	{                                                                                          \
		.path = p, .alias_of = of                                                          \
	}

#define CE "command_executor."
#define TE "text_editor_mcp."

/* Order matters: a section comes before its keys (to_json builds objects in this order). */
static const struct key keys[] = {
    SECTION("command_executor"),
    BOOL(CE "enabled", command_executor.enabled, "true", "COMMAND_EXECUTOR_ENABLED"),
    ENUM(CE "backend", command_executor.backend, backend_names, "auto", "EXECUTOR_BACKEND"),
    STR(CE "docker_host", command_executor.docker_host, F_NONEMPTY | F_URL,
	"unix:///var/run/docker.sock", "DOCKER_HOST"),
    {.path = CE "environments",
     .type = V_ENVMAP,
     .def = "python=coding-agent-executor-python:latest,"
	    "miniforge=coding-agent-executor-miniforge:latest,"
	    "node=coding-agent-executor-node:latest,"
	    "java=coding-agent-executor-java:latest,"
	    "go=coding-agent-executor-go:latest"},
    STR(CE "default_environment", command_executor.default_environment, F_NONEMPTY, "python", NULL),
    STR(CE "state_dir", command_executor.state_dir, F_NONEMPTY | F_ABSPATH, NULL, "CAE_STATE_DIR"),
    LISTF(CE "local_repo_roots", command_executor.local_repo_roots, F_ABSPATH, NULL),
    SECTION(CE "mcp_server"),
    STR(CE "mcp_server.name", command_executor.mcp_server.name, 0, "command-executor", NULL),
    LIST(CE "mcp_server.command", command_executor.mcp_server.command,
	 "npx,@sunwood-ai-labs/command-executor-mcp-server"),
    SECTION(CE "docker"),
    STR(CE "docker.base_image", command_executor.docker.base_image, F_NONEMPTY,
	"coding-agent-executor-python:latest", "EXECUTOR_BASE_IMAGE"),
    SECTION(CE "docker.resources"),
    DOUBLE(CE "docker.resources.cpu_limit", command_executor.docker.resources.cpu_limit, 1024, "2",
	   "EXECUTOR_CPU_LIMIT"),
    MEMSIZE(CE "docker.resources.memory_limit", command_executor.docker.resources.memory_limit,
	    command_executor.docker.resources.memory_bytes, 6 * MiB, 1024 * TiB, "4g",
	    "EXECUTOR_MEMORY_LIMIT"),
    MEMSIZE(CE "docker.resources.disk_limit", command_executor.docker.resources.disk_limit,
	    command_executor.docker.resources.disk_bytes, 0, 1024 * 1024 * TiB, "10g", NULL),
    INT(CE "docker.resources.pids_limit", command_executor.docker.resources.pids_limit, 1, 4194304,
	"1024", NULL),
    SECTION(CE "docker.network"),
    ENUM(CE "docker.network.mode", command_executor.docker.network.mode, netmode_names, "bridge",
	 NULL),
    BOOL(CE "docker.network.external_access", command_executor.docker.network.external_access,
	 "true", NULL),
    BOOL(CE "docker.network.whitelist_mode", command_executor.docker.network.whitelist_mode,
	 "false", NULL),
    LIST(CE "docker.network.allowed_domains", command_executor.docker.network.allowed_domains,
	 NULL),
    BOOL(CE "docker.mount_docker_socket", command_executor.docker.mount_docker_socket, "false",
	 NULL),
    SECTION(CE "clone"),
    BOOL(CE "clone.shallow", command_executor.clone.shallow, "true", NULL),
    INT(CE "clone.depth", command_executor.clone.depth, 1, 1000000, "1", NULL),
    BOOL(CE "clone.auto_install_deps", command_executor.clone.auto_install_deps, "true", NULL),
    INT(CE "clone.timeout_seconds", command_executor.clone.timeout_seconds, 1, 86400, "300", NULL),
    SECTION(CE "execution"),
    INT(CE "execution.timeout_seconds", command_executor.execution.timeout_seconds, 1, 604800,
	"1800", "EXECUTOR_TIMEOUT"),
    SIZE(CE "execution.max_output_size", command_executor.execution.max_output_size, 1, GiB,
	 "1048576"),
    ENUM(CE "execution.truncate", command_executor.execution.truncate, truncate_names, "head",
	 NULL),
    SECTION(CE "cleanup"),
    INT(CE "cleanup.interval_hours", command_executor.cleanup.interval_hours, 1, 8760, "24", NULL),
    INT(CE "cleanup.stale_threshold_hours", command_executor.cleanup.stale_threshold_hours, 1, 8760,
	"24", NULL),
    SECTION(CE "allowed_commands"),
    BOOL(CE "allowed_commands.use_default", command_executor.allowed_commands.use_default, "true",
	 NULL),
    LIST(CE "allowed_commands.additional", command_executor.allowed_commands.additional, NULL),
    LIST(CE "allowed_commands.exclude", command_executor.allowed_commands.exclude, NULL),
    LIST(CE "allowed_commands.custom_list", command_executor.allowed_commands.custom_list, NULL),
    BOOL(CE "allowed_commands.enforce", command_executor.allowed_commands.enforce, "false", NULL),
    SECTION(CE "local"),
    ENUM(CE "local.sandbox", command_executor.local.sandbox, sandbox_names, "auto", NULL),
    BOOL(CE "local.network", command_executor.local.network, "false", NULL),
    BOOL(CE "local.unconfined", command_executor.local.unconfined, "false", NULL),
    INT(CE "local.sandbox_uid", command_executor.local.sandbox_uid, 1, 2147483646, "100000", NULL),

    SECTION("text_editor_mcp"),
    BOOL(TE "enabled", text_editor_mcp.enabled, "true", "TEXT_EDITOR_MCP_ENABLED"),
    ENUM(TE "mode", text_editor_mcp.mode, editor_names, "native", NULL),
    SECTION(TE "mcp_server"),
    STR(TE "mcp_server.name", text_editor_mcp.mcp_server.name, 0, "text-editor", NULL),
    LIST(TE "mcp_server.command", text_editor_mcp.mcp_server.command,
	 "npx,-y,mcp-server-text-editor"),
    ALIAS(TE "command", TE "mcp_server.command"),
    SIZE(TE "max_file_size", text_editor_mcp.max_file_size, 1, GiB, "10m"),
    INT(TE "undo_depth", text_editor_mcp.undo_depth, 0, 1000, "10", NULL),
    SIZE(TE "undo_max_bytes", text_editor_mcp.undo_max_bytes, 0, 16 * GiB, "64m"),
    INT(TE "view_max_chars", text_editor_mcp.view_max_chars, 100, 10000000, "16000", NULL),

    SECTION("worker"),
    BOOL("worker.enabled", worker.enabled, "true", "PICOCLAW_WORKER_ENABLED"),
    BOOL("worker.auto_commit", worker.auto_commit, "false", "PICOCLAW_WORKER_AUTO_COMMIT"),
    STR("worker.commit_message_prefix", worker.commit_message_prefix, 0, "[Worker Auto-Commit]",
	"PICOCLAW_WORKER_COMMIT_PREFIX"),
    ALIAS("worker.commit_prefix", "worker.commit_message_prefix"),
    INT("worker.command_timeout", worker.command_timeout, 1, 86400, "300",
	"PICOCLAW_WORKER_COMMAND_TIMEOUT"),
    ALIAS("worker.shell_timeout", "worker.command_timeout"),
    INT("worker.git_timeout", worker.git_timeout, 1, 3600, "30", "PICOCLAW_WORKER_GIT_TIMEOUT"),
    BOOL("worker.stop_on_error", worker.stop_on_error, "false", "PICOCLAW_WORKER_STOP_ON_ERROR"),
    BOOL("worker.dry_run", worker.dry_run, "false", "PICOCLAW_WORKER_DRY_RUN"),
    BOOL("worker.rollback", worker.rollback, "false", "PICOCLAW_WORKER_ROLLBACK"),

    SECTION("github"),
    STR("github.token", github.token, F_SECRET, NULL, "GITHUB_PERSONAL_ACCESS_TOKEN"),
    SECTION("gitlab"),
    STR("gitlab.token", gitlab.token, F_SECRET, NULL, "GITLAB_PERSONAL_ACCESS_TOKEN"),
    STR("gitlab.api_url", gitlab.api_url, F_NONEMPTY | F_URL, "https://gitlab.com/api/v4",
	"GITLAB_API_URL"),
    BOOL("gitlab.ssl_verify", gitlab.ssl_verify, "true", NULL),
};

#define N_KEYS ARRAY_SIZE(keys)

/* Where a value came from, for messages. */
struct where {
	const char *file; /* with line > 0 */
	int line;
	const char *env; /* an environment variable */
};

struct ctx {
	cae_config *cfg;
	char *const *envp;
	cae_error *err;
	const char *file;
	const cfg_ydoc *doc;
	bool seen[N_KEYS];	     /* given in the file */
	struct where origin[N_KEYS]; /* where the effective value was set (zero: default) */
};

static const char *env_get(char *const *envp, const char *name)
{
	size_t n = strlen(name);
	for (char *const *e = envp; e && *e; e++)
		if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

static const char *env_get_nonempty(char *const *envp, const char *name)
{
	const char *v = env_get(envp, name);
	return v && *v ? v : NULL;
}

static int find_key(const char *path)
{
	for (size_t i = 0; i < N_KEYS; i++)
		if (strcmp(keys[i].path, path) == 0)
			return (int)i;
	return -1;
}

static int canonical(int idx)
{
	if (idx >= 0 && keys[idx].alias_of)
		return find_key(keys[idx].alias_of);
	return idx;
}

static void *field(cae_config *cfg, size_t off)
{
	return (char *)cfg + off;
}

static const void *cfield(const cae_config *cfg, size_t off)
{
	return (const char *)cfg + off;
}

/* ---- value syntax -------------------------------------------------------------------- */

static bool ieq(const char *a, const char *b)
{
	return strcasecmp(a, b) == 0;
}

int cae_config_parse_bool(const char *s, bool *out)
{
	if (!s)
		return -EINVAL;
	if (ieq(s, "true") || ieq(s, "yes") || ieq(s, "on") || strcmp(s, "1") == 0) {
		*out = true;
		return 0;
	}
	if (ieq(s, "false") || ieq(s, "no") || ieq(s, "off") || strcmp(s, "0") == 0) {
		*out = false;
		return 0;
	}
	return -EINVAL;
}

static int parse_ll(const char *s, long long *out)
{
	const char *p = s;
	bool neg = false;
	if (*p == '+' || *p == '-')
		neg = *p++ == '-';
	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	unsigned long long v = 0;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (9223372036854775807ull - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	if (*p)
		return -EINVAL;
	*out = neg ? -(long long)v : (long long)v;
	return 0;
}

/* "123", "1.5": integer part and up to 9 fraction digits (as a numerator over 1e9). */
static int parse_decimal(const char **pp, unsigned long long *ip, unsigned long long *frac)
{
	const char *p = *pp;
	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	unsigned long long v = 0;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	unsigned long long f = 0, scale = 1000000000ull;
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		bool first_dropped = true;
		for (; isdigit((unsigned char)*p); p++) {
			if (scale > 1) {
				scale /= 10;
				f += (unsigned long long)(*p - '0') * scale;
			} else if (first_dropped) {
				/* round at the 10th digit, so that "0.12345678899999999" (a double
				 * printed back with 17 digits) reads as 0.123456789 */
				first_dropped = false;
				if (*p >= '5')
					f++;
			}
		}
		if (f >= 1000000000ull) {
			if (v == UINT64_MAX)
				return -ERANGE;
			v++;
			f -= 1000000000ull;
		}
	}
	*pp = p;
	*ip = v;
	*frac = f;
	return 0;
}

int cae_config_parse_size(const char *s, uint64_t *out)
{
	if (!s)
		return -EINVAL;
	const char *p = s;
	unsigned long long ip, frac;
	int r = parse_decimal(&p, &ip, &frac);
	if (r < 0)
		return -EINVAL;
	while (*p == ' ')
		p++;
	unsigned long long mult = 1;
	switch (tolower((unsigned char)*p)) {
	case 'k':
		mult = 1024ull;
		break;
	case 'm':
		mult = MiB;
		break;
	case 'g':
		mult = GiB;
		break;
	case 't':
		mult = TiB;
		break;
	default:
		break;
	}
	if (mult > 1) {
		p++;
		if (tolower((unsigned char)*p) == 'i')
			p++;
	}
	if (tolower((unsigned char)*p) == 'b')
		p++;
	if (*p)
		return -EINVAL;
	if (ip > UINT64_MAX / mult)
		return -EINVAL;
	unsigned long long v = ip * mult;
	/* the fraction: frac / 1e9 of one unit (exact for the usual halves and quarters) */
	unsigned long long add = (unsigned long long)((double)frac / 1e9 * (double)mult);
	if (v > UINT64_MAX - add)
		return -EINVAL;
	*out = v + add;
	return 0;
}

static int parse_positive_double(const char *s, double *out)
{
	const char *p = s;
	unsigned long long ip, frac;
	if (parse_decimal(&p, &ip, &frac) < 0 || *p)
		return -EINVAL;
	*out = (double)ip + (double)frac / 1e9;
	return 0;
}

static const char *trim(char *s)
{
	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
		s++;
	size_t n = strlen(s);
	while (n > 0 &&
	       (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
		s[--n] = '\0';
	return s;
}

/* A bounded, escaped rendering of a bad value for messages. */
static void show_value(char *buf, size_t size, const char *s, size_t len)
{
	size_t o = 0;
	if (size < 8) {
		if (size)
			buf[0] = '\0';
		return;
	}
	buf[o++] = '"';
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (o + 8 >= size || i >= 64) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		if (ch == '"' || ch == '\\') {
			buf[o++] = '\\';
			buf[o++] = (char)ch;
		} else if (ch < 0x20 || ch == 0x7f) {
			o += (size_t)snprintf(buf + o, size - o, "\\x%02x", ch);
		} else {
			buf[o++] = (char)ch;
		}
	}
	buf[o++] = '"';
	buf[o] = '\0';
}

static const char *expected(const struct key *k, char *buf, size_t size)
{
	switch (k->type) {
	case V_BOOL:
		return "expected a boolean (true/false, yes/no, on/off, 1/0)";
	case V_INT:
		if (k->max >= 86400 && k->min == 1)
			return "expected a positive integer";
		snprintf(buf, size, "expected an integer from %lld to %lld", k->min, k->max);
		return buf;
	case V_SIZE:
	case V_MEMSIZE:
		return "expected a size such as 4g, 512m or a number of bytes";
	case V_DOUBLE:
		return "expected a positive number";
	case V_STRING:
		return "expected a string";
	case V_ENUM: {
		size_t o = (size_t)snprintf(buf, size, "expected one of");
		for (size_t i = 0; k->names[i] && o < size; i++)
			o += (size_t)snprintf(buf + o, size - o, "%s%s", i ? ", " : " ",
					      k->names[i]);
		return buf;
	}
	case V_STRLIST:
		return "expected a list of strings";
	case V_ENVMAP:
		return "expected a mapping of environment name to image";
	case V_SECTION:
		return "expected a mapping";
	}
	return "bad value";
}

static int key_error(struct ctx *c, const struct where *w, int idx, const char *fmt, ...)
    _printf_(4, 5);
static int key_error(struct ctx *c, const struct where *w, int idx, const char *fmt, ...)
{
	char msg[CAE_ERROR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	const char *path = idx >= 0 ? keys[idx].path : "config";
	if (w && w->env)
		return cae_error_set(c->err, -EINVAL, "environment variable %s (%s): %s", w->env,
				     path, msg);
	if (w && w->file && w->line > 0)
		return cae_error_set(c->err, -EINVAL, "%s:%d: %s: %s", w->file, w->line, path, msg);
	return cae_error_set(c->err, -EINVAL, "%s: %s", path, msg);
}

static int bad_value(struct ctx *c, const struct where *w, int idx, const char *got, size_t len)
{
	char ebuf[256], vbuf[128];
	const char *exp = expected(&keys[idx], ebuf, sizeof(ebuf));
	if (keys[idx].flags & F_SECRET)
		return key_error(c, w, idx, "%s", exp);
	show_value(vbuf, sizeof(vbuf), got, len);
	return key_error(c, w, idx, "%s, got %s", exp, vbuf);
}

static int add_warning(cae_config *cfg, const char *fmt, ...) _printf_(2, 3);
static int add_warning(cae_config *cfg, const char *fmt, ...)
{
	cae_config_strlist *l = &cfg->warnings;
	if (l->n > MAX_WARNINGS)
		return 0;
	char line[512];
	if (l->n == MAX_WARNINGS) {
		snprintf(line, sizeof(line), "more warnings omitted");
	} else {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(line, sizeof(line), fmt, ap);
		va_end(ap);
	}
	char **items = realloc(l->items, (l->n + 1) * sizeof(*items));
	if (!items)
		return -ENOMEM;
	l->items = items;
	l->items[l->n] = strdup(line);
	if (!l->items[l->n])
		return -ENOMEM;
	l->n++;
	return 0;
}

/* ---- owned values ------------------------------------------------------------------- */

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

static int strlist_push(cae_config_strlist *l, const char *s, size_t len)
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

static void envmap_clear(cae_config *cfg)
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
	if (n == 0 || n > MAX_ENV_NAME)
		return false;
	if (!islower((unsigned char)s[0]) && !isdigit((unsigned char)s[0]))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!islower((unsigned char)s[i]) && !isdigit((unsigned char)s[i]) && s[i] != '_' &&
		    s[i] != '.' && s[i] != '-')
			return false;
	return true;
}

/* Appends name -> image to a map being built (tmp), refusing duplicates and bad names. */
static int envmap_push(struct ctx *c, const struct where *w, int idx, cae_config_environment **map,
		       size_t *n, const char *name, size_t name_len, const char *image,
		       size_t image_len)
{
	char vbuf[128];
	if (memchr(name, '\0', name_len) || !valid_env_name(name)) {
		show_value(vbuf, sizeof(vbuf), name, name_len);
		return key_error(
		    c, w, idx,
		    "invalid environment name %s (lower-case letters, digits, '_', '.', "
		    "'-', at most %d characters)",
		    vbuf, MAX_ENV_NAME);
	}
	if (image_len == 0 || memchr(image, '\0', image_len))
		return key_error(c, w, idx, "environment %s: expected a non-empty image name",
				 name);
	for (size_t i = 0; i < *n; i++)
		if (strcmp((*map)[i].name, name) == 0)
			return key_error(c, w, idx, "environment %s given twice", name);
	if (*n >= MAX_ENVIRONMENTS)
		return key_error(c, w, idx, "more than %d environments", MAX_ENVIRONMENTS);
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

static void envmap_free(cae_config_environment *map, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(map[i].name);
		free(map[i].image);
	}
	free(map);
}

static void envmap_install(cae_config *cfg, cae_config_environment *map, size_t n)
{
	envmap_clear(cfg);
	cfg->command_executor.environments = map;
	cfg->command_executor.n_environments = n;
}

static int set_string_field(cae_config *cfg, size_t off, const char *s)
{
	char **f = field(cfg, off);
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

static char *expand_home(struct ctx *c, const char *s)
{
	if (s[0] == '~' && (s[1] == '/' || s[1] == '\0')) {
		const char *home = env_get_nonempty(c->envp, "HOME");
		if (home)
			return cae_path_join(home, s[1] ? s + 2 : "");
	}
	return strdup(s);
}

/* Appends one list item (NUL-terminated, trimmed), "~/"-expanded and required absolute
 * for F_ABSPATH lists. */
static int list_push_item(struct ctx *c, const struct where *w, int idx, cae_config_strlist *l,
			  const char *t)
{
	if (!(keys[idx].flags & F_ABSPATH))
		return strlist_push(l, t, strlen(t));
	_cleanup_free_ char *p = expand_home(c, t);
	if (!p)
		return -ENOMEM;
	if (p[0] != '/') {
		char vbuf[128];
		show_value(vbuf, sizeof(vbuf), t, strlen(t));
		return key_error(c, w, idx, "expected absolute paths, got %s", vbuf);
	}
	return strlist_push(l, p, strlen(p));
}

/* Sets a scalar-typed key (and lists/maps from their text form when !yaml) from text. */
static int set_from_text(struct ctx *c, int idx, const char *text, size_t len,
			 const struct where *w, bool yaml)
{
	const struct key *k = &keys[idx];
	cae_config *cfg = c->cfg;
	int r;

	if (memchr(text, '\0', len))
		return key_error(c, w, idx, "%s, got a value containing a NUL byte",
				 expected(k, (char[128]){0}, 128));
	_cleanup_free_ char *copy = strndup(text, len);
	if (!copy)
		return -ENOMEM;

	switch (k->type) {
	case V_SECTION:
		return key_error(c, w, idx, "is a section, expected a mapping");
	case V_BOOL: {
		bool b;
		if (cae_config_parse_bool(trim(copy), &b) < 0)
			return bad_value(c, w, idx, text, len);
		*(bool *)field(cfg, k->off) = b;
		break;
	}
	case V_INT: {
		long long v;
		if (parse_ll(trim(copy), &v) < 0)
			return bad_value(c, w, idx, text, len);
		if (v < k->min || v > k->max) {
			char vbuf[128];
			show_value(vbuf, sizeof(vbuf), text, len);
			return key_error(c, w, idx, "expected an integer from %lld to %lld, got %s",
					 k->min, k->max, vbuf);
		}
		*(int *)field(cfg, k->off) = (int)v;
		break;
	}
	case V_SIZE:
	case V_MEMSIZE: {
		uint64_t v;
		const char *t = trim(copy);
		if (cae_config_parse_size(t, &v) < 0)
			return bad_value(c, w, idx, text, len);
		if (v < (uint64_t)k->min || v > (uint64_t)k->max) {
			char vbuf[128];
			show_value(vbuf, sizeof(vbuf), text, len);
			return key_error(
			    c, w, idx,
			    "expected a size from %lld to %lld bytes, got %s (%llu bytes)", k->min,
			    k->max, vbuf, (unsigned long long)v);
		}
		if (k->type == V_MEMSIZE) {
			r = set_string_field(cfg, k->off, t);
			if (r < 0)
				return r;
			*(uint64_t *)field(cfg, k->off2) = v;
		} else {
			*(uint64_t *)field(cfg, k->off) = v;
		}
		break;
	}
	case V_DOUBLE: {
		double v;
		if (parse_positive_double(trim(copy), &v) < 0)
			return bad_value(c, w, idx, text, len);
		if (v < 0.01 || v > (double)k->max) {
			char vbuf[128];
			show_value(vbuf, sizeof(vbuf), text, len);
			return key_error(c, w, idx, "expected a number from 0.01 to %lld, got %s",
					 k->max, vbuf);
		}
		*(double *)field(cfg, k->off) = v;
		break;
	}
	case V_STRING: {
		if ((k->flags & F_NONEMPTY) && len == 0)
			return key_error(c, w, idx, "expected a non-empty string");
		if (k->flags & F_ABSPATH) {
			_cleanup_free_ char *p = expand_home(c, copy);
			if (!p)
				return -ENOMEM;
			if (p[0] != '/') {
				char vbuf[128];
				show_value(vbuf, sizeof(vbuf), text, len);
				return key_error(c, w, idx, "expected an absolute path, got %s",
						 vbuf);
			}
			return set_string_field(cfg, k->off, p);
		}
		return set_string_field(cfg, k->off, copy);
	}
	case V_ENUM: {
		const char *t = trim(copy);
		for (int i = 0; k->names[i]; i++)
			if (ieq(t, k->names[i])) {
				*(int *)field(cfg, k->off) = i;
				return 0;
			}
		return bad_value(c, w, idx, text, len);
	}
	case V_STRLIST: {
		if (yaml)
			return bad_value(c, w, idx, text, len);
		cae_config_strlist l = {0};
		char *save = NULL;
		for (char *tok = strtok_r(copy, ",", &save); tok;
		     tok = strtok_r(NULL, ",", &save)) {
			const char *t = trim(tok);
			if (!*t)
				continue;
			if (l.n >= MAX_LIST_ITEMS) {
				cae_config_strlist_clear(&l);
				return key_error(c, w, idx, "more than %d items", MAX_LIST_ITEMS);
			}
			r = list_push_item(c, w, idx, &l, t);
			if (r < 0) {
				cae_config_strlist_clear(&l);
				return r;
			}
		}
		cae_config_strlist *f = field(cfg, k->off);
		cae_config_strlist_clear(f);
		*f = l;
		break;
	}
	case V_ENVMAP: {
		if (yaml)
			return bad_value(c, w, idx, text, len);
		cae_config_environment *map = NULL;
		size_t n = 0;
		char *save = NULL;
		for (char *tok = strtok_r(copy, ",", &save); tok;
		     tok = strtok_r(NULL, ",", &save)) {
			char *t = (char *)trim(tok);
			if (!*t)
				continue;
			char *eq = strchr(t, '=');
			if (!eq) {
				envmap_free(map, n);
				char vbuf[128];
				show_value(vbuf, sizeof(vbuf), t, strlen(t));
				return key_error(c, w, idx, "expected name=image, got %s", vbuf);
			}
			*eq = '\0';
			const char *name = trim(t), *image = trim(eq + 1);
			r = envmap_push(c, w, idx, &map, &n, name, strlen(name), image,
					strlen(image));
			if (r < 0) {
				envmap_free(map, n);
				return r;
			}
		}
		envmap_install(cfg, map, n);
		break;
	}
	}
	return 0;
}

/* ---- YAML ---------------------------------------------------------------------------- */

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

static int set_from_node(struct ctx *c, int idx, size_t node, int key_line)
{
	const struct key *k = &keys[idx];
	const cfg_ynode *v = &c->doc->nodes[node];
	struct where w = {.file = c->file, .line = key_line};
	int r;

	if (cfg_ynode_is_null(v)) {
		if (k->type == V_STRLIST)
			cae_config_strlist_clear(field(c->cfg, k->off));
		else if (k->type == V_ENVMAP)
			envmap_clear(c->cfg);
		return 0;
	}
	if (v->type == CFG_YSCALAR)
		return set_from_text(c, idx, v->value, v->len, &w, true);

	char ebuf[256];
	if (k->type == V_STRLIST && v->type == CFG_YSEQ) {
		cae_config_strlist l = {0};
		for (size_t i = 0; i < v->n; i++) {
			const cfg_ynode *it = &c->doc->nodes[v->items[i]];
			struct where iw = {.file = c->file, .line = it->line};
			if (i >= MAX_LIST_ITEMS)
				r = key_error(c, &iw, idx, "more than %d items", MAX_LIST_ITEMS);
			else if (it->type != CFG_YSCALAR || cfg_ynode_is_null(it))
				r = key_error(c, &iw, idx, "item %zu: expected a string, got %s",
					      i + 1,
					      cfg_ynode_is_null(it) ? "null" : node_kind(it));
			else if (it->len == 0 || memchr(it->value, '\0', it->len))
				r = key_error(
				    c, &iw, idx,
				    "item %zu: expected a non-empty string without NUL bytes",
				    i + 1);
			else if (keys[idx].flags & F_ABSPATH) {
				_cleanup_free_ char *t = strndup(it->value, it->len);
				r = t ? list_push_item(c, &iw, idx, &l, t) : -ENOMEM;
			} else
				r = strlist_push(&l, it->value, it->len);
			if (r < 0) {
				cae_config_strlist_clear(&l);
				return r;
			}
		}
		cae_config_strlist *f = field(c->cfg, k->off);
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
			struct where iw = {.file = c->file, .line = kn->line};
			if (kn->type != CFG_YSCALAR || vn->type != CFG_YSCALAR)
				r = key_error(c, &iw, idx, "%s", expected(k, ebuf, sizeof(ebuf)));
			else if (cfg_ynode_is_null(vn))
				r = envmap_push(c, &iw, idx, &map, &n, kn->value, kn->len, "", 0);
			else
				r = envmap_push(c, &iw, idx, &map, &n, kn->value, kn->len,
						vn->value, vn->len);
			if (r < 0) {
				envmap_free(map, n);
				return r;
			}
		}
		envmap_install(c->cfg, map, n);
		return 0;
	}
	return key_error(c, &w, idx, "%s, got %s", expected(k, ebuf, sizeof(ebuf)), node_kind(v));
}

static int walk_map(struct ctx *c, size_t node, const char *prefix)
{
	const cfg_ynode *m = &c->doc->nodes[node];
	int r;
	for (size_t i = 0; i + 1 < m->n; i += 2) {
		size_t kidx = m->items[i], vidx = m->items[i + 1];
		const cfg_ynode *k = &c->doc->nodes[kidx];
		char path[MAX_KEY_PATH];
		int idx = -1;
		if (k->type != CFG_YSCALAR) {
			r = add_warning(c->cfg, "%s:%d: a key in %s is %s, not a string (ignored)",
					c->file, k->line, *prefix ? prefix : "the top level",
					node_kind(k));
			if (r < 0)
				return r;
			continue;
		}
		int n =
		    snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "." : "", k->value);
		if (n > 0 && (size_t)n < sizeof(path) && !memchr(k->value, '\0', k->len))
			idx = find_key(path);
		if (idx < 0) {
			char shown[160];
			show_value(shown, sizeof(shown), path, strnlen(path, sizeof(path)));
			r = add_warning(c->cfg, "%s:%d: unknown key %s (ignored)", c->file, k->line,
					shown);
			if (r < 0)
				return r;
			continue;
		}
		int canon = canonical(idx);
		struct where w = {.file = c->file, .line = k->line};
		if (c->seen[canon]) {
			if (canon != idx)
				return key_error(c, &w, idx, "given twice (also as %s)",
						 keys[canon].path);
			return key_error(c, &w, idx, "given twice");
		}
		c->seen[canon] = true;
		c->origin[canon] = w;
		if (keys[canon].type == V_SECTION) {
			const cfg_ynode *v = &c->doc->nodes[vidx];
			if (cfg_ynode_is_null(v))
				continue;
			if (v->type != CFG_YMAP)
				return key_error(c, &w, idx, "expected a mapping, got %s",
						 node_kind(v));
			r = walk_map(c, vidx, keys[canon].path);
		} else {
			r = set_from_node(c, canon, vidx, k->line);
		}
		if (r < 0)
			return r;
	}
	return 0;
}

static int apply_yaml(struct ctx *c, const char *text, size_t len)
{
	cfg_ydoc doc;
	int line = 0;
	char msg[512];
	int r = cfg_yaml_parse(text, len, CAE_CONFIG_MAX_DEPTH, &doc, &line, msg, sizeof(msg));
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
		else if (!cfg_ynode_is_null(root))
			r = cae_error_set(
			    c->err, -EINVAL,
			    "%s:%d: expected a mapping of keys at the top level, got %s", c->file,
			    root->line, node_kind(root));
	}
	c->doc = NULL;
	cfg_ydoc_free(&doc);
	return r;
}

/* ---- environment, validation --------------------------------------------------------- */

static int apply_env(struct ctx *c)
{
	for (size_t i = 0; i < N_KEYS; i++) {
		if (!keys[i].env)
			continue;
		const char *v = env_get_nonempty(c->envp, keys[i].env);
		if (!v)
			continue;
		struct where w = {.env = keys[i].env};
		int r = set_from_text(c, (int)i, v, strlen(v), &w, false);
		if (r < 0)
			return r;
		c->origin[i] = w;
	}
	return 0;
}

static bool explicit(const struct ctx *c, const char *path)
{
	int i = find_key(path);
	return i >= 0 && (c->origin[i].line > 0 || c->origin[i].env);
}

static const struct where *origin_of(const struct ctx *c, const char *path)
{
	return &c->origin[find_key(path)];
}

static int validate(struct ctx *c, bool warn)
{
	cae_config *cfg = c->cfg;
	char list[512];
	int r;

	/* default_environment must name a configured environment */
	if (cfg->command_executor.n_environments > 0 &&
	    !cae_config_environment_image(cfg, cfg->command_executor.default_environment)) {
		size_t o = 0;
		list[0] = '\0';
		for (size_t i = 0; i < cfg->command_executor.n_environments && o < sizeof(list);
		     i++)
			o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%s", i ? ", " : "",
					      cfg->command_executor.environments[i].name);
		const char *path =
		    explicit(c, CE "default_environment") || !explicit(c, CE "environments")
			? CE "default_environment"
			: CE "environments";
		char vbuf[128];
		const char *de = cfg->command_executor.default_environment;
		show_value(vbuf, sizeof(vbuf), de, strlen(de));
		return key_error(
		    c, origin_of(c, path), find_key(path),
		    "the default environment %s is not one of the configured environments (%s)",
		    vbuf, list);
	}

	/* running commands unconfined is a decision the config states in so many words */
	if (cfg->command_executor.local.sandbox == CAE_CONFIG_SANDBOX_NONE &&
	    !cfg->command_executor.local.unconfined)
		return key_error(c, origin_of(c, CE "local.sandbox"), find_key(CE "local.sandbox"),
				 "none runs commands on this host unconfined: it needs "
				 "command_executor.local.unconfined: true");

	/* network: mode and external_access describe one thing */
	struct cae_config_net_view {
		cae_config_network_mode *mode;
		bool *ext;
	} net = {&cfg->command_executor.docker.network.mode,
		 &cfg->command_executor.docker.network.external_access};
	bool mode_set = explicit(c, CE "docker.network.mode");
	bool ext_set = explicit(c, CE "docker.network.external_access");
	if (mode_set && ext_set && (*net.mode == CAE_CONFIG_NETWORK_NONE) == *net.ext) {
		return key_error(c, origin_of(c, CE "docker.network.external_access"),
				 find_key(CE "docker.network.external_access"),
				 "%s contradicts command_executor.docker.network.mode: %s",
				 *net.ext ? "true" : "false",
				 cae_config_network_mode_name(*net.mode));
	}
	if (mode_set)
		*net.ext = *net.mode != CAE_CONFIG_NETWORK_NONE;
	else if (!*net.ext)
		*net.mode = CAE_CONFIG_NETWORK_NONE;
	else if (*net.mode == CAE_CONFIG_NETWORK_NONE)
		*net.mode = CAE_CONFIG_NETWORK_BRIDGE;
	if (cfg->command_executor.docker.network.whitelist_mode && !*net.ext)
		return key_error(
		    c, origin_of(c, CE "docker.network.whitelist_mode"),
		    find_key(CE "docker.network.whitelist_mode"),
		    "a domain allow-list needs external access (the network mode is none)");

	if (warn && cfg->command_executor.docker.mount_docker_socket) {
		r = add_warning(cfg,
				"command_executor.docker.mount_docker_socket is true: the agent "
				"controls the host's Docker engine (root on the host)");
		if (r < 0)
			return r;
	}
	return 0;
}

/* ---- public API ----------------------------------------------------------------------- */

static char *default_state_dir(char *const *envp)
{
	const char *xdg = env_get_nonempty(envp, "XDG_STATE_HOME");
	if (xdg && xdg[0] == '/')
		return cae_path_join(xdg, "cae");
	const char *home = env_get_nonempty(envp, "HOME");
	if (home && home[0] == '/')
		return cae_path_join(home, ".local/state/cae");
	return strdup("/var/lib/cae");
}

cae_config *cae_config_defaults(char *const *envp)
{
	if (!envp)
		envp = environ;
	cae_config *cfg = calloc(1, sizeof(*cfg));
	if (!cfg)
		return NULL;
	struct ctx c = {.cfg = cfg, .envp = envp};
	for (size_t i = 0; i < N_KEYS; i++) {
		if (!keys[i].def)
			continue;
		if (set_from_text(&c, (int)i, keys[i].def, strlen(keys[i].def), NULL, false) < 0) {
			cae_config_free(cfg);
			return NULL;
		}
	}
	cfg->command_executor.state_dir = default_state_dir(envp);
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
	struct ctx c = {.cfg = cfg, .envp = envp, .err = err, .file = file};
	int r = 0;
	if (file) {
		cfg->source = strdup(file);
		if (!cfg->source)
			r = -ENOMEM;
		else if (len > CAE_CONFIG_MAX_BYTES)
			r = cae_error_set(err, -EFBIG, "%s: larger than %d bytes", file,
					  CAE_CONFIG_MAX_BYTES);
		else
			r = apply_yaml(&c, text, len);
	}
	if (r >= 0)
		r = apply_env(&c);
	if (r >= 0)
		r = validate(&c, true);
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
	int r = cae_read_file(AT_FDCWD, path, CAE_CONFIG_MAX_BYTES, text, len);
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
		file = env_get_nonempty(envp, "CAE_CONFIG");
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
			const char *xdg = env_get_nonempty(envp, "XDG_CONFIG_HOME");
			const char *home = env_get_nonempty(envp, "HOME");
			if (xdg && xdg[0] == '/')
				xdg_path = cae_path_join(xdg, "cae/config.yaml");
			else if (home)
				xdg_path = cae_path_join(home, ".config/cae/config.yaml");
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
		if (strlist_push(dst, src->items[i], strlen(src->items[i])) < 0)
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
	for (size_t i = 0; i < N_KEYS; i++) {
		const struct key *k = &keys[i];
		if (k->alias_of)
			continue;
		if (k->type == V_STRING || k->type == V_MEMSIZE)
			*(char **)field(cfg, k->off) = NULL;
		else if (k->type == V_STRLIST)
			*(cae_config_strlist *)field(cfg, k->off) = (cae_config_strlist){0};
	}
	cfg->command_executor.environments = NULL;
	cfg->command_executor.n_environments = 0;
	cfg->warnings = (cae_config_strlist){0};
	cfg->source = NULL;

	int r = 0;
	for (size_t i = 0; i < N_KEYS && r >= 0; i++) {
		const struct key *k = &keys[i];
		if (k->alias_of)
			continue;
		if (k->type == V_STRING || k->type == V_MEMSIZE)
			r = set_string_field(cfg, k->off, *(char *const *)cfield(src, k->off));
		else if (k->type == V_STRLIST)
			r = strlist_copy(field(cfg, k->off), cfield(src, k->off));
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
	int idx = canonical(find_key(key));
	if (idx < 0)
		return cae_error_set(err, -EINVAL, "unknown config key \"%.200s\"", key);
	/* all or nothing: change a copy, validate it, then swap it in */
	cae_config *tmp = cae_config_dup(cfg);
	if (!tmp)
		return cae_error_set(err, -ENOMEM, "out of memory");
	struct ctx c = {.cfg = tmp, .envp = environ, .err = err};
	int r = set_from_text(&c, idx, value, strlen(value), NULL, false);
	if (r >= 0) {
		/* keep network mode and external_access consistent with the key just set */
		if (strcmp(keys[idx].path, CE "docker.network.mode") == 0)
			c.origin[idx].line = 1;
		else if (strcmp(keys[idx].path, CE "docker.network.external_access") == 0 &&
			 tmp->command_executor.docker.network.external_access &&
			 tmp->command_executor.docker.network.mode == CAE_CONFIG_NETWORK_NONE)
			tmp->command_executor.docker.network.mode = CAE_CONFIG_NETWORK_BRIDGE;
		r = validate(&c, false);
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

const char *cae_config_backend_name(cae_config_backend b)
{
	return (unsigned)b < ARRAY_SIZE(backend_names) - 1 ? backend_names[b] : "?";
}

const char *cae_config_network_mode_name(cae_config_network_mode m)
{
	return (unsigned)m < ARRAY_SIZE(netmode_names) - 1 ? netmode_names[m] : "?";
}

/* ---- JSON ----------------------------------------------------------------------------- */

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
		char part[MAX_KEY_PATH];
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
	for (size_t i = 0; i < N_KEYS; i++) {
		const struct key *k = &keys[i];
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
			v = json_boolean(*(const bool *)cfield(cfg, k->off));
			break;
		case V_INT:
			v = json_integer(*(const int *)cfield(cfg, k->off));
			break;
		case V_SIZE:
			v = json_integer((json_int_t) * (const uint64_t *)cfield(cfg, k->off));
			break;
		case V_DOUBLE:
			v = json_real(*(const double *)cfield(cfg, k->off));
			break;
		case V_MEMSIZE:
			v = jstr(*(char *const *)cfield(cfg, k->off));
			break;
		case V_STRING: {
			const char *s = *(char *const *)cfield(cfg, k->off);
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
			v = json_string(k->names[*(const int *)cfield(cfg, k->off)]);
			break;
		case V_STRLIST:
			v = strlist_json(cfield(cfg, k->off));
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

void cae_config_free(cae_config *cfg)
{
	if (!cfg)
		return;
	for (size_t i = 0; i < N_KEYS; i++) {
		const struct key *k = &keys[i];
		if (k->alias_of)
			continue;
		switch (k->type) {
		case V_STRING:
		case V_MEMSIZE:
			free(*(char **)field(cfg, k->off));
			break;
		case V_STRLIST:
			cae_config_strlist_clear(field(cfg, k->off));
			break;
		case V_ENVMAP:
			envmap_clear(cfg);
			break;
		default:
			break;
		}
	}
	cae_config_strlist_clear(&cfg->warnings);
	free(cfg->source);
	free(cfg);
}
