/* The command policy: the allow list by category, the deny list, and the check of every
 * simple command found by the lexer (shlex.c). See include/cae/policy.h. */
#include "cae/policy.h"

#include "base/macro.h"
#include "base/utf8.h"
#include "policy/shlex.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "base/banned.h"

/* ---- the default lists ---- */

/* clang-format off */

static const char *const default_build[] = {
	"npm",    "yarn",  "pnpm", "pip",   "pip3",   "conda", "mamba",    "python",
	"python3", "cargo", "make", "cmake", "bundle", "gem",   "composer", "dotnet",
};
static const char *const default_test[] = {
	"pytest", "jest", "mocha", "rspec", "phpunit", "cargo test", "dotnet test",
};
static const char *const default_lint[] = {
	"eslint", "prettier", "black", "flake8", "pylint", "mypy", "rubocop", "rustfmt", "clippy", "tsc",
};
static const char *const default_files[] = {
	"ls", "cat", "head", "tail", "grep", "find", "wc", "diff", "tree", "file", "stat",
};
static const char *const default_vcs[] = {
	"git status", "git diff", "git log", "git branch", "git show", "git blame",
};
static const char *const default_utils[] = {
	"echo",  "pwd",   "cd",  "mkdir", "rm",  "cp",  "mv",   "touch", "chmod", "env",  "which",
	"curl",  "wget",  "tar", "unzip", "jq",  "sed", "awk",  "sort",  "uniq",  "xargs",
};

static const struct {
	const char *const *items;
	size_t n;
	const char *key, *label;
} categories[CAE_POLICY_CAT_COUNT] = {
	[CAE_POLICY_CAT_BUILD_PACKAGE] = {default_build, ARRAY_SIZE(default_build), "build_package",
					  "Build/Package Management"},
	[CAE_POLICY_CAT_TEST] = {default_test, ARRAY_SIZE(default_test), "test", "Test Execution"},
	[CAE_POLICY_CAT_LINTER_FORMATTER] = {default_lint, ARRAY_SIZE(default_lint),
					     "linter_formatter", "Linter/Formatter"},
	[CAE_POLICY_CAT_FILE_OPERATIONS] = {default_files, ARRAY_SIZE(default_files),
					    "file_operations", "File Operations"},
	[CAE_POLICY_CAT_VERSION_CONTROL] = {default_vcs, ARRAY_SIZE(default_vcs), "version_control",
					    "Version Control"},
	[CAE_POLICY_CAT_UTILITIES] = {default_utils, ARRAY_SIZE(default_utils), "utilities",
				      "Utilities"},
	[CAE_POLICY_CAT_CUSTOM] = {NULL, 0, "custom", "Custom"},
};

/* the deny list, with the obvious siblings (doas, pkill, halt, sftp, ...) */
static const struct {
	const char *name;
	const char *why;
} deny_list[] = {
	{"sudo", "privilege escalation"},
	{"doas", "privilege escalation"},
	{"pkexec", "privilege escalation"},
	{"su", "switching users"},
	{"runuser", "switching users"},
	{"chown", "changing file ownership"},
	{"mount", "mounting file systems"},
	{"umount", "mounting file systems"},
	{"iptables", "changing the network configuration"},
	{"ip6tables", "changing the network configuration"},
	{"systemctl", "controlling services"},
	{"service", "controlling services"},
	{"kill", "killing processes"},
	{"killall", "killing processes"},
	{"pkill", "killing processes"},
	{"reboot", "controlling the system"},
	{"shutdown", "controlling the system"},
	{"halt", "controlling the system"},
	{"poweroff", "controlling the system"},
	{"dd", "low-level disk access"},
	{"mkfs", "creating file systems"},
	{"fdisk", "partitioning disks"},
	{"sfdisk", "partitioning disks"},
	{"cfdisk", "partitioning disks"},
	{"parted", "partitioning disks"},
	{"nc", "arbitrary network connections"},
	{"netcat", "arbitrary network connections"},
	{"ncat", "arbitrary network connections"},
	{"nmap", "network scanning"},
	{"ssh", "remote login"},
	{"scp", "remote file transfer"},
	{"sftp", "remote file transfer"},
	{"rsync", "remote file transfer"},
};

/* name prefixes denied like the name before the separator: mkfs.ext4, iptables-restore */
static const struct {
	const char *prefix;
	const char *why;
} deny_prefix[] = {
	{"mkfs.", "creating file systems"},
	{"iptables-", "changing the network configuration"},
	{"ip6tables-", "changing the network configuration"},
};

/* Shell builtins and keywords: always fine, even with enforce. (`.` and `source` run a
 * script and are not here.) */
static const char *const builtins[] = {
	":",      "true",    "false",   "test",    "[",        "[[",     "cd",      "pwd",
	"echo",   "printf",  "export",  "unset",   "set",      "shift",  "read",    "exit",
	"return", "wait",    "local",   "readonly", "declare", "typeset", "alias",  "unalias",
	"type",   "hash",    "umask",   "ulimit",  "break",    "continue", "getopts", "jobs",
	"fg",     "bg",      "let",     "pushd",   "popd",     "dirs",   "shopt",   "times",
	"trap",   "command", "exec",    "eval",    "builtin",  "help",   "caller",  "disown",
};

static const char *const shells[] = {"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "yash", "posh"};
/* clang-format on */

/* ---- the policy ---- */

struct entry {
	char *text;   /* normalised: words separated by one space */
	char **words; /* pointers into a copy of text split at the spaces */
	char *words_buf;
	size_t n_words;
	cae_policy_category cat;
};

struct cae_policy {
	struct entry *entries;
	size_t n, cap;
	bool enforce;
	size_t max_length;
	unsigned max_depth;
};

void cae_policy_options_init(cae_policy_options *o)
{
	memset(o, 0, sizeof(*o));
	o->use_default = true;
}

const char *cae_policy_category_key(cae_policy_category c)
{
	return (unsigned)c < CAE_POLICY_CAT_COUNT ? categories[c].key : "";
}

const char *cae_policy_category_label(cae_policy_category c)
{
	return (unsigned)c < CAE_POLICY_CAT_COUNT ? categories[c].label : "";
}

static bool streq(const char *a, const char *b)
{
	return strcmp(a, b) == 0;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* "  git   status " -> "git status"; NULL for an empty entry or on ENOMEM (*enomem set). */
static char *normalise(const char *s, bool *enomem)
{
	size_t n = strlen(s);
	char *out = malloc(n + 1);
	if (!out) {
		*enomem = true;
		return NULL;
	}
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		while (i < n && is_space(s[i]))
			i++;
		if (i == n)
			break;
		if (k > 0)
			out[k++] = ' ';
		while (i < n && !is_space(s[i]))
			out[k++] = s[i++];
	}
	out[k] = '\0';
	if (k == 0) {
		free(out);
		return NULL;
	}
	return out;
}

static cae_policy_category default_category(const char *text)
{
	for (unsigned c = 0; c < CAE_POLICY_CAT_CUSTOM; c++)
		for (size_t i = 0; i < categories[c].n; i++)
			if (streq(categories[c].items[i], text))
				return (cae_policy_category)c;
	return CAE_POLICY_CAT_CUSTOM;
}

static ssize_t find_entry(const cae_policy *p, const char *text)
{
	for (size_t i = 0; i < p->n; i++)
		if (streq(p->entries[i].text, text))
			return (ssize_t)i;
	return -1;
}

static void entry_free(struct entry *e)
{
	free(e->text);
	free(e->words);
	free(e->words_buf);
}

/* Adds a normalised entry (taking ownership of text) unless present. */
static int add_entry(cae_policy *p, char *text, cae_policy_category cat)
{
	if (find_entry(p, text) >= 0) {
		free(text);
		return 0;
	}
	if (p->n == p->cap) {
		size_t ncap = p->cap ? p->cap * 2 : 128;
		struct entry *ne = realloc(p->entries, ncap * sizeof(*ne));
		if (!ne) {
			free(text);
			return -ENOMEM;
		}
		p->entries = ne;
		p->cap = ncap;
	}
	struct entry e = {.text = text, .cat = cat};
	e.words_buf = strdup(text);
	size_t n = 1;
	for (const char *q = text; *q; q++)
		n += *q == ' ';
	e.words = calloc(n, sizeof(*e.words));
	if (!e.words_buf || !e.words) {
		entry_free(&e);
		return -ENOMEM;
	}
	e.n_words = 0;
	for (char *q = e.words_buf;;) {
		e.words[e.n_words++] = q;
		char *sp = strchr(q, ' ');
		if (!sp)
			break;
		*sp = '\0';
		q = sp + 1;
	}
	p->entries[p->n++] = e;
	return 0;
}

static int add_list(cae_policy *p, const cae_policy_list *l, const char *what, cae_error *err)
{
	for (size_t i = 0; i < l->n; i++) {
		bool enomem = false;
		char *t = l->items[i] ? normalise(l->items[i], &enomem) : NULL;
		if (enomem)
			return cae_error_set(err, -ENOMEM, "out of memory");
		if (!t)
			return cae_error_set(err, -EINVAL, "allowed_commands.%s[%zu]: empty entry",
					     what, i);
		int r = add_entry(p, t, default_category(t));
		if (r < 0)
			return cae_error_set(err, r, "out of memory");
	}
	return 0;
}

/* Removes `text`, and when it is one word, every "text ..." entry. */
static void remove_entries(cae_policy *p, const char *text)
{
	bool one_word = strchr(text, ' ') == NULL;
	size_t k = 0;
	for (size_t i = 0; i < p->n; i++) {
		struct entry *e = &p->entries[i];
		if (streq(e->text, text) || (one_word && streq(e->words[0], text))) {
			entry_free(e);
			continue;
		}
		p->entries[k++] = *e;
	}
	p->n = k;
}

cae_policy *cae_policy_new(const cae_policy_options *opts, cae_error *err)
{
	cae_policy_options defaults;
	if (!opts) {
		cae_policy_options_init(&defaults);
		opts = &defaults;
	}
	cae_policy *p = calloc(1, sizeof(*p));
	if (!p) {
		cae_error_set(err, -ENOMEM, "out of memory");
		return NULL;
	}
	p->enforce = opts->enforce;
	p->max_length = opts->max_length ? opts->max_length : CAE_POLICY_DEFAULT_MAX_LENGTH;
	p->max_depth = opts->max_depth ? opts->max_depth : CAE_POLICY_DEFAULT_MAX_DEPTH;
	int r = 0;
	if (opts->use_default) {
		for (unsigned c = 0; c < CAE_POLICY_CAT_CUSTOM && r == 0; c++) {
			for (size_t i = 0; i < categories[c].n && r == 0; i++) {
				char *t = strdup(categories[c].items[i]);
				r = t ? add_entry(p, t, (cae_policy_category)c) : -ENOMEM;
			}
		}
		if (r < 0)
			cae_error_set(err, r, "out of memory");
	} else {
		r = add_list(p, &opts->custom_list, "custom_list", err);
	}
	for (size_t i = 0; i < opts->exclude.n && r == 0; i++) {
		bool enomem = false;
		_cleanup_free_ char *t =
		    opts->exclude.items[i] ? normalise(opts->exclude.items[i], &enomem) : NULL;
		if (enomem)
			r = cae_error_set(err, -ENOMEM, "out of memory");
		else if (!t)
			r = cae_error_set(err, -EINVAL,
					  "allowed_commands.exclude[%zu]: empty entry", i);
		else
			remove_entries(p, t);
	}
	if (r == 0)
		r = add_list(p, &opts->additional, "additional", err);
	if (r < 0) {
		cae_policy_free(p);
		return NULL;
	}
	return p;
}

void cae_policy_free(cae_policy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++)
		entry_free(&p->entries[i]);
	free(p->entries);
	free(p);
}

bool cae_policy_enforced(const cae_policy *p)
{
	return p && p->enforce;
}

bool cae_policy_is_listed(const cae_policy *p, const char *entry)
{
	if (!p || !entry)
		return false;
	bool enomem = false;
	_cleanup_free_ char *t = normalise(entry, &enomem);
	return t && find_entry(p, t) >= 0;
}

/* ---- the allow list as JSON and as prompt text ---- */

json_t *cae_policy_allowed_json(const cae_policy *p)
{
	if (!p)
		return NULL;
	json_t *o = json_object();
	if (!o)
		return NULL;
	for (unsigned c = 0; c < CAE_POLICY_CAT_COUNT; c++) {
		json_t *a = json_array();
		if (!a)
			goto fail;
		for (size_t i = 0; i < p->n; i++) {
			if (p->entries[i].cat != c)
				continue;
			/* entries come from config text: keep them valid UTF-8 for JSON */
			size_t n;
			_cleanup_free_ char *s =
			    cae__utf8_sanitize(p->entries[i].text, strlen(p->entries[i].text), &n);
			if (!s || json_array_append_new(a, json_stringn(s, n)) < 0) {
				json_decref(a);
				goto fail;
			}
		}
		if (c == CAE_POLICY_CAT_CUSTOM && json_array_size(a) == 0) {
			json_decref(a);
			continue;
		}
		if (json_object_set_new(o, categories[c].key, a) < 0)
			goto fail;
	}
	return o;
fail:
	json_decref(o);
	return NULL;
}

char *cae_policy_allowed_text(const cae_policy *p)
{
	if (!p)
		return NULL;
	size_t cap = 1;
	for (unsigned c = 0; c < CAE_POLICY_CAT_COUNT; c++)
		cap += strlen(categories[c].label) + 3;
	for (size_t i = 0; i < p->n; i++)
		cap += strlen(p->entries[i].text) + 2;
	char *out = malloc(cap);
	if (!out)
		return NULL;
	size_t k = 0;
	for (unsigned c = 0; c < CAE_POLICY_CAT_COUNT; c++) {
		bool first = true;
		for (size_t i = 0; i < p->n; i++) {
			if (p->entries[i].cat != c)
				continue;
			const char *t = p->entries[i].text;
			size_t tl = strlen(t);
			if (first) {
				if (k > 0)
					out[k++] = '\n';
				size_t ll = strlen(categories[c].label);
				memcpy(out + k, categories[c].label, ll);
				k += ll;
				memcpy(out + k, ": ", 2);
				k += 2;
				first = false;
			} else {
				memcpy(out + k, ", ", 2);
				k += 2;
			}
			memcpy(out + k, t, tl);
			k += tl;
		}
	}
	out[k] = '\0';
	/* entries come from config text: hand back valid UTF-8 */
	if (!cae__utf8_is_valid(out, k)) {
		size_t n;
		char *s = cae__utf8_sanitize(out, k, &n);
		free(out);
		return s;
	}
	return out;
}

/* ---- verdicts ---- */

/* Copies src[0..n) into dst[size] as valid UTF-8 without control characters (they become
 * spaces, invalid bytes U+FFFD), cut at a character boundary with "..." when too long. */
static void copy_clean(char *dst, size_t size, const char *src, size_t n)
{
	size_t k = 0, i = 0;
	bool cut = false;
	while (i < n) {
		const unsigned char *u = (const unsigned char *)src + i;
		size_t sl = cae__utf8_seq_len(u, n - i);
		const char *piece;
		size_t pl;
		char one;
		if (sl == 0) {
			piece = "\xef\xbf\xbd";
			pl = 3;
			sl = 1;
		} else if (sl == 1 && (u[0] < 0x20 || u[0] == 0x7f)) {
			one = ' ';
			piece = &one;
			pl = 1;
		} else {
			piece = src + i;
			pl = sl;
		}
		if (k + pl + 4 > size) {
			cut = true;
			break;
		}
		memcpy(dst + k, piece, pl);
		k += pl;
		i += sl;
	}
	if (cut) {
		memcpy(dst + k, "...", 3);
		k += 3;
	}
	dst[k] = '\0';
}

static void verdict_allow(cae_policy_verdict *v)
{
	v->allowed = true;
	v->rule = CAE_POLICY_RULE_NONE;
	v->program[0] = v->command[0] = v->reason[0] = '\0';
}

struct check {
	const cae_policy *p;
	cae_policy_verdict *v;
};

/* Fills the verdict as denied; reason is "command '<what>' is not allowed: <why>".
 * Returns 1 (stop). */
static int deny(struct check *ck, cae_policy_rule rule, const char *program, const char *what,
		const char *src, size_t src_len, const char *why)
{
	cae_policy_verdict *v = ck->v;
	v->allowed = false;
	v->rule = rule;
	copy_clean(v->program, sizeof(v->program), program, strlen(program));
	copy_clean(v->command, sizeof(v->command), src ? src : "", src ? src_len : 0);
	char shown[CAE_POLICY_PROGRAM_MAX];
	copy_clean(shown, sizeof(shown), what, strlen(what));
	char reason[CAE_POLICY_REASON_MAX];
	snprintf(reason, sizeof(reason), "command '%s' is not allowed: %s", shown, why);
	copy_clean(v->reason, sizeof(v->reason), reason, strlen(reason));
	return 1;
}

static int deny_msg(struct check *ck, cae_policy_rule rule, const char *src, size_t src_len,
		    const char *fmt, ...) _printf_(5, 6);
static int deny_msg(struct check *ck, cae_policy_rule rule, const char *src, size_t src_len,
		    const char *fmt, ...)
{
	cae_policy_verdict *v = ck->v;
	v->allowed = false;
	v->rule = rule;
	v->program[0] = '\0';
	copy_clean(v->command, sizeof(v->command), src ? src : "", src ? src_len : 0);
	char reason[CAE_POLICY_REASON_MAX * 2];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	copy_clean(v->reason, sizeof(v->reason), reason, strlen(reason));
	return 1;
}

char *cae_policy_verdict_stderr(const cae_policy_verdict *v)
{
	if (!v || v->allowed)
		return strdup("");
	bool in = v->command[0] && !streq(v->command, v->program);
	size_t n = strlen(v->reason) + strlen(v->command) + 16;
	char *s = malloc(n);
	if (!s)
		return NULL;
	if (in)
		snprintf(s, n, "%s\n  in: %s\n", v->reason, v->command);
	else
		snprintf(s, n, "%s\n", v->reason);
	return s;
}

/* ---- the rules ---- */

static const char *base_name(const char *s)
{
	const char *b = strrchr(s, '/');
	return b ? b + 1 : s;
}

static bool in_table(const char *s, const char *const *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (streq(s, t[i]))
			return true;
	return false;
}

static const char *denied_why(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(deny_list); i++)
		if (streq(name, deny_list[i].name))
			return deny_list[i].why;
	for (size_t i = 0; i < ARRAY_SIZE(deny_prefix); i++)
		if (strncmp(name, deny_prefix[i].prefix, strlen(deny_prefix[i].prefix)) == 0)
			return deny_prefix[i].why;
	return NULL;
}

/* A long option `--xyz` (without its "=value") abbreviates `full`. */
static bool long_opt_is(const char *arg, const char *full)
{
	const char *o = arg + 2;
	size_t n = strcspn(o, "=");
	return n > 0 && n <= strlen(full) && strncmp(o, full, n) == 0;
}

/* rm with a recursive and a force flag, in any spelling and order. */
static bool rm_recursive_force(const cae_sh_word *w, size_t n)
{
	bool rec = false, force = false;
	for (size_t k = 1; k < n; k++) {
		const char *a = w[k].text;
		if (w[k].dynamic)
			continue;
		if (streq(a, "--"))
			break;
		if (a[0] != '-' || a[1] == '\0')
			continue;
		if (a[1] == '-') {
			rec = rec || long_opt_is(a, "recursive");
			force = force || long_opt_is(a, "force");
			continue;
		}
		for (const char *c = a + 1; *c; c++) {
			rec = rec || *c == 'r' || *c == 'R';
			force = force || *c == 'f';
		}
	}
	return rec && force;
}

/* A chmod mode that gives everyone read, write and execute: 777 in any numeric spelling
 * (0777, 1777, ...), or a symbolic clause like a+rwx, ugo=rwx. */
static bool mode_is_777(const char *m)
{
	size_t n = strlen(m);
	if (n > 0 && strspn(m, "01234567") == n) {
		unsigned long v = 0;
		for (size_t i = 0; i < n && v <= 07777; i++)
			v = v * 8 + (unsigned long)(m[i] - '0');
		return (v & 0777) == 0777;
	}
	/* symbolic: [ugoa]*([-+=][rwxXst]*)+ separated by commas */
	const char *c = m;
	while (*c) {
		bool u = false, g = false, o = false;
		for (; *c && strchr("ugoa", *c); c++) {
			u = u || *c == 'u' || *c == 'a';
			g = g || *c == 'g' || *c == 'a';
			o = o || *c == 'o' || *c == 'a';
		}
		while (*c == '+' || *c == '-' || *c == '=') {
			char op = *c++;
			bool r = false, wr = false, x = false;
			for (; *c && strchr("rwxXstugo", *c); c++) {
				r = r || *c == 'r';
				wr = wr || *c == 'w';
				x = x || *c == 'x' || *c == 'X';
			}
			if (op != '-' && u && g && o && r && wr && x)
				return true;
		}
		if (*c != ',')
			return false;
		c++;
	}
	return false;
}

static bool chmod_777(const cae_sh_word *w, size_t n)
{
	for (size_t k = 1; k < n; k++) {
		const char *a = w[k].text;
		if (w[k].dynamic)
			continue;
		if (streq(a, "--"))
			return k + 1 < n && mode_is_777(w[k + 1].text);
		if (a[0] == '-' && a[1] == '-')
			continue;
		if (a[0] == '-' && a[1] && strspn(a + 1, "cfvR") == strlen(a + 1))
			continue;
		return mode_is_777(a);
	}
	return false;
}

static bool entry_matches(const struct entry *e, const char *prog, const char *name,
			  const cae_sh_word *args, size_t nargs)
{
	if (!streq(e->words[0], name) && !streq(e->words[0], prog))
		return false;
	size_t k = 0;
	for (size_t m = 1; m < e->n_words; m++) {
		while (k < nargs && (args[k].text[0] == '-' || args[k].text[0] == '+')) {
			if (streq(name, "git") &&
			    (streq(args[k].text, "-C") || streq(args[k].text, "-c")))
				k++;
			k++;
		}
		if (k >= nargs || !streq(args[k].text, e->words[m]))
			return false;
		k++;
	}
	return true;
}

static bool listed(const cae_policy *p, const char *prog, const char *name, const cae_sh_word *args,
		   size_t nargs)
{
	for (size_t i = 0; i < p->n; i++)
		if (entry_matches(&p->entries[i], prog, name, args, nargs))
			return true;
	return false;
}

static int on_command(const cae_sh_command *cmd, void *userdata);

/* Lexes a command string found inside a command (sh -c, eval, alias, trap, env -S) and
 * checks every simple command in it. Returns 0, 1 when denied, or -ENOMEM. */
static int check_string(struct check *ck, const char *s, size_t len, unsigned depth,
			const char *what, const char *src, size_t src_len)
{
	cae_error e = {0};
	if (depth > ck->p->max_depth)
		return deny_msg(ck, CAE_POLICY_RULE_LIMIT, src, src_len,
				"command line is nested more than %u levels deep",
				ck->p->max_depth);
	int r = cae__sh_lex(s, len, depth, ck->p->max_depth, on_command, ck, &e);
	if (r >= 0)
		return r > 0 ? 1 : 0;
	if (r == -ENOMEM)
		return r;
	if (r == -ELOOP)
		return deny_msg(ck, CAE_POLICY_RULE_LIMIT, src, src_len, "%s is %s", what,
				e.message);
	return deny_msg(ck, CAE_POLICY_RULE_PARSE, src, src_len, "could not parse %s: %s", what,
			e.code ? e.message : "syntax error");
}

/* Skips a wrapper's options from index j; returns the index of its first operand.
 * short_arg: option letters taking an argument; long_arg: long options taking one. */
static size_t skip_options(const cae_sh_word *w, size_t n, size_t j, const char *short_arg,
			   const char *const *long_arg, size_t n_long)
{
	while (j < n) {
		const char *a = w[j].text;
		if (w[j].dynamic || a[0] != '-' || a[1] == '\0')
			return j;
		if (streq(a, "--"))
			return j + 1;
		if (a[1] == '-') {
			bool takes = false;
			if (!strchr(a, '='))
				for (size_t i = 0; i < n_long; i++)
					takes = takes || streq(a + 2, long_arg[i]);
			j += takes ? 2 : 1;
			continue;
		}
		bool takes_next = false;
		for (const char *c = a + 1; *c; c++) {
			if (short_arg && strchr(short_arg, *c)) {
				takes_next = c[1] == '\0';
				break;
			}
		}
		j += takes_next ? 2 : 1;
	}
	return j;
}

static int analyze(struct check *ck, const cae_sh_word *w, size_t n, const char *src,
		   size_t src_len, unsigned depth);

/* find ... -exec CMD ... ; : the command is checked like any other. */
static int check_find(struct check *ck, const cae_sh_word *w, size_t n, const char *src,
		      size_t src_len, unsigned depth)
{
	for (size_t k = 1; k < n; k++) {
		const char *a = w[k].text;
		if (!streq(a, "-exec") && !streq(a, "-execdir") && !streq(a, "-ok") &&
		    !streq(a, "-okdir"))
			continue;
		size_t start = k + 1, end = start;
		while (end < n && !streq(w[end].text, ";") && !streq(w[end].text, "+"))
			end++;
		if (end > start) {
			int r = analyze(ck, w + start, end - start, src, src_len, depth + 1);
			if (r != 0)
				return r;
		}
		k = end;
	}
	return 0;
}

/* The last step, once wrappers are peeled off: w[0] is the program. */
static int check_program(struct check *ck, const cae_sh_word *w, size_t n, const char *src,
			 size_t src_len, unsigned depth)
{
	const char *prog = w[0].text, *name = base_name(prog);
	const char *why = denied_why(name);
	if (why)
		return deny(ck, CAE_POLICY_RULE_DENY_LIST, name, name, src, src_len, why);
	if (streq(name, "rm") && rm_recursive_force(w, n))
		return deny(ck, CAE_POLICY_RULE_DENY_LIST, name, "rm -rf", src, src_len,
			    "recursive forced deletion");
	if (streq(name, "chmod") && chmod_777(w, n))
		return deny(ck, CAE_POLICY_RULE_DENY_LIST, name, "chmod 777", src, src_len,
			    "world-writable permissions");
	int r = 0;
	if (streq(name, "find")) {
		r = check_find(ck, w, n, src, src_len, depth);
	} else if (streq(name, "alias")) {
		for (size_t k = 1; k < n && r == 0; k++) {
			const char *eq = strchr(w[k].text, '=');
			if (eq)
				r = check_string(ck, eq + 1, strlen(eq + 1), depth + 1, "an alias",
						 src, src_len);
		}
	} else if (streq(name, "trap") && n >= 3 && w[1].text[0] != '-') {
		r = check_string(ck, w[1].text, w[1].len, depth + 1, "a trap command", src,
				 src_len);
	}
	if (r != 0)
		return r;
	if (ck->p->enforce && !in_table(name, builtins, ARRAY_SIZE(builtins)) &&
	    !listed(ck->p, prog, name, w + 1, n - 1)) {
		char what[CAE_POLICY_PROGRAM_MAX];
		snprintf(what, sizeof(what), "%s", name);
		/* name the subcommand too when the list has phrases for this program */
		for (size_t i = 0; i < ck->p->n; i++) {
			const struct entry *e = &ck->p->entries[i];
			if (e->n_words > 1 && streq(e->words[0], name)) {
				size_t k = 1;
				while (k < n && w[k].text[0] == '-')
					k++;
				if (k < n)
					snprintf(what, sizeof(what), "%s %s", name, w[k].text);
				break;
			}
		}
		return deny(ck, CAE_POLICY_RULE_NOT_ALLOWED, name, what, src, src_len,
			    "not in the allowed command list");
	}
	return 0;
}

/* sh -c STRING: the string is checked; sh SCRIPT: sh is the program. */
static int check_shell(struct check *ck, const cae_sh_word *w, size_t n, const char *src,
		       size_t src_len, unsigned depth)
{
	bool c = false;
	size_t j = 1;
	while (j < n) {
		const char *a = w[j].text;
		if (w[j].dynamic || (a[0] != '-' && a[0] != '+') || a[1] == '\0')
			break;
		if (streq(a, "--")) {
			j++;
			break;
		}
		if (a[0] == '-' && a[1] == '-') {
			bool takes = streq(a, "--rcfile") || streq(a, "--init-file");
			j += takes ? 2 : 1;
			continue;
		}
		bool takes = false;
		for (const char *q = a + 1; *q; q++) {
			c = c || *q == 'c';
			takes = takes || *q == 'o' || *q == 'O';
		}
		j += takes ? 2 : 1;
	}
	if (!c || j >= n)
		return check_program(ck, w, n, src, src_len, depth);
	char what[64];
	snprintf(what, sizeof(what), "the command string of %s -c", base_name(w[0].text));
	return check_string(ck, w[j].text, w[j].len, depth + 1, what, src, src_len);
}

/* eval ARGS: the arguments joined by spaces are a command line. */
static int check_eval(struct check *ck, const cae_sh_word *w, size_t n, const char *src,
		      size_t src_len, unsigned depth)
{
	size_t len = 0;
	for (size_t k = 1; k < n; k++)
		len += w[k].len + 1;
	if (len == 0)
		return 0;
	char *s = malloc(len);
	if (!s)
		return -ENOMEM;
	size_t o = 0;
	for (size_t k = 1; k < n; k++) {
		memcpy(s + o, w[k].text, w[k].len);
		o += w[k].len;
		s[o++] = ' ';
	}
	int r = check_string(ck, s, o - 1, depth + 1, "the arguments of eval", src, src_len);
	free(s);
	return r;
}

static const char *const timeout_long[] = {"signal", "kill-after"};
static const char *const nice_long[] = {"adjustment"};
static const char *const time_long[] = {"format", "output"};
static const char *const stdbuf_long[] = {"input", "output", "error"};
static const char *const xargs_long[] = {"arg-file",  "delimiter", "max-args",
					 "max-procs", "max-chars", "process-slot-var"};

/* env's options: returns the first operand; *split receives -S's string. */
static size_t skip_env(const cae_sh_word *w, size_t n, size_t j, const char **split,
		       size_t *split_len)
{
	while (j < n) {
		const char *a = w[j].text;
		if (w[j].dynamic)
			break;
		if (streq(a, "-")) {
			j++;
			continue;
		}
		if (a[0] != '-' || a[1] == '\0')
			break;
		if (streq(a, "--"))
			return j + 1;
		if (a[1] == '-') {
			const char *eq = strchr(a, '=');
			if (eq && strncmp(a, "--split-string=", 15) == 0) {
				*split = eq + 1;
				*split_len = strlen(eq + 1);
				j++;
			} else if (!eq && (streq(a, "--unset") || streq(a, "--chdir") ||
					   streq(a, "--split-string"))) {
				if (streq(a, "--split-string") && j + 1 < n) {
					*split = w[j + 1].text;
					*split_len = w[j + 1].len;
				}
				j += 2;
			} else {
				j++;
			}
			continue;
		}
		size_t step = 1;
		for (const char *c = a + 1; *c; c++) {
			if (!strchr("uCS", *c))
				continue;
			const char *arg = c[1] ? c + 1 : (j + 1 < n ? w[j + 1].text : NULL);
			if (!c[1])
				step = 2;
			if (*c == 'S' && arg) {
				*split = arg;
				*split_len = strlen(arg);
			}
			break;
		}
		j += step;
	}
	while (j < n && !w[j].dynamic && strchr(w[j].text, '='))
		j++;
	return j;
}

/* Every simple command comes here: assignments and wrappers are peeled off, then the
 * program is checked. Returns 0 (allowed), 1 (denied: the verdict is filled) or -ENOMEM. */
static int analyze(struct check *ck, const cae_sh_word *w, size_t n, const char *src,
		   size_t src_len, unsigned depth)
{
	if (depth > ck->p->max_depth)
		return deny_msg(ck, CAE_POLICY_RULE_LIMIT, src, src_len,
				"command line is nested more than %u levels deep",
				ck->p->max_depth);
	size_t i = 0;
	while (i < n && w[i].assign_len > 0)
		i++;
	while (i < n) {
		const cae_sh_word *pw = &w[i];
		if (pw->dynamic) {
			if (ck->p->enforce)
				return deny(ck, CAE_POLICY_RULE_NOT_ALLOWED, pw->text, pw->text,
					    src, src_len,
					    "the program name is only known at run time");
			return 0;
		}
		const char *name = base_name(pw->text);
		if (pw->glob) {
			for (size_t k = 0; k < ARRAY_SIZE(deny_list); k++)
				if (fnmatch(name, deny_list[k].name, 0) == 0)
					return deny(ck, CAE_POLICY_RULE_DENY_LIST,
						    deny_list[k].name, pw->text, src, src_len,
						    deny_list[k].why);
		}
		size_t j = i + 1;
		if (streq(name, "env")) {
			const char *split = NULL;
			size_t split_len = 0;
			j = skip_env(w, n, j, &split, &split_len);
			if (split) {
				int r = check_string(ck, split, split_len, depth + 1,
						     "the string of env -S", src, src_len);
				if (r != 0)
					return r;
			}
			if (j >= n)
				break; /* env alone prints the environment */
		} else if (streq(name, "command")) {
			for (; j < n && w[j].text[0] == '-' && !w[j].dynamic; j++) {
				if (streq(w[j].text, "--")) {
					j++;
					break;
				}
				if (strpbrk(w[j].text, "vV"))
					return 0; /* command -v: a lookup, nothing runs */
			}
		} else if (streq(name, "exec")) {
			j = skip_options(w, n, j, "a", NULL, 0);
		} else if (streq(name, "nohup") || streq(name, "setsid") ||
			   streq(name, "builtin")) {
			j = skip_options(w, n, j, NULL, NULL, 0);
		} else if (streq(name, "time")) {
			j = skip_options(w, n, j, "fo", time_long, ARRAY_SIZE(time_long));
		} else if (streq(name, "nice")) {
			j = skip_options(w, n, j, "n", nice_long, ARRAY_SIZE(nice_long));
		} else if (streq(name, "timeout")) {
			j = skip_options(w, n, j, "sk", timeout_long, ARRAY_SIZE(timeout_long));
			j++; /* the duration */
		} else if (streq(name, "stdbuf")) {
			j = skip_options(w, n, j, "ioe", stdbuf_long, ARRAY_SIZE(stdbuf_long));
		} else if (streq(name, "xargs")) {
			j = skip_options(w, n, j, "IadELnPs", xargs_long, ARRAY_SIZE(xargs_long));
			if (j >= n)
				break; /* xargs runs echo */
		} else if (streq(name, "busybox")) {
			if (j >= n || w[j].text[0] == '-')
				break;
		} else if (in_table(name, shells, ARRAY_SIZE(shells))) {
			return check_shell(ck, w + i, n - i, src, src_len, depth);
		} else if (streq(name, "eval")) {
			return check_eval(ck, w + i, n - i, src, src_len, depth);
		} else {
			break;
		}
		if (j >= n)
			return 0; /* a wrapper with nothing to run */
		i = j;
	}
	if (i >= n)
		return 0;
	return check_program(ck, w + i, n - i, src, src_len, depth);
}

/* ---- bash brace expansion: {sudo,x} ls runs sudo, rm -{r,f} x is rm -r -f x ---- */

#define BRACE_MAX_WORD 4096u /* longer words are left as they are */
#define BRACE_MAX_WORDS 256u /* words a simple command may expand to */

struct word_list {
	cae_sh_word *w;
	size_t n, cap;
};

static void word_list_free(struct word_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->w[i].text);
	free(l->w);
	*l = (struct word_list){0};
}

/* Appends a copy of proto whose text is a + b + c. */
static int word_list_add(struct word_list *l, const cae_sh_word *proto, const char *a, size_t al,
			 const char *b, size_t bl, const char *c, size_t cl)
{
	if (l->n == l->cap) {
		size_t ncap = l->cap ? l->cap * 2 : 16;
		cae_sh_word *nw = realloc(l->w, ncap * sizeof(*nw));
		if (!nw)
			return -ENOMEM;
		l->w = nw;
		l->cap = ncap;
	}
	char *t = malloc(al + bl + cl + 1);
	if (!t)
		return -ENOMEM;
	memcpy(t, a, al);
	memcpy(t + al, b, bl);
	memcpy(t + al + bl, c, cl);
	t[al + bl + cl] = '\0';
	cae_sh_word *w = &l->w[l->n++];
	*w = *proto;
	w->text = t;
	w->len = al + bl + cl;
	if (w->assign_len > w->len)
		w->assign_len = 0;
	return 0;
}

/* The leftmost brace group with a top-level comma: s[*open] == '{', s[*close] == '}'.
 * One pass with a stack of open braces. Returns 1 when found, 0 when not, -ENOMEM. */
static int find_brace_group(const char *s, size_t len, size_t *open, size_t *close)
{
	struct brace {
		size_t pos;
		bool comma, valid;
	} *stack = malloc((len + 1) * sizeof(*stack));
	if (!stack)
		return -ENOMEM;
	size_t top = 0;
	int found = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '{') {
			/* ${...} is no brace group */
			stack[top++] = (struct brace){i, false, !(i > 0 && s[i - 1] == '$')};
		} else if (s[i] == ',' && top > 0) {
			stack[top - 1].comma = true;
		} else if (s[i] == '}' && top > 0) {
			top--;
			if (stack[top].comma && stack[top].valid &&
			    (!found || stack[top].pos < *open)) {
				*open = stack[top].pos;
				*close = i;
				found = 1;
			}
		}
	}
	free(stack);
	return found;
}

/* Expands brace groups in the words that have an unquoted '{' (bash: s{u,x}do is "sudo" and
 * "sxdo"). Returns 1 with *out filled when a word has braces, 0 when none has, or -ENOMEM.
 * Bounded: words longer than BRACE_MAX_WORD are kept as they are, and so is every word once
 * BRACE_MAX_WORDS words came out; a word whose expansion is cut short there is followed by
 * its unexpanded self; at most 4 * BRACE_MAX_WORDS partial words are made in all. */
static int expand_braces(const cae_sh_word *w, size_t n, struct word_list *out)
{
	bool any = false;
	for (size_t i = 0; i < n && !any; i++)
		any = w[i].brace && w[i].len <= BRACE_MAX_WORD;
	if (!any)
		return 0;
	struct word_list stack = {0};
	size_t budget = 4 * BRACE_MAX_WORDS;
	int r = 0;
	for (size_t i = 0; i < n && r == 0; i++) {
		if (!w[i].brace || w[i].len > BRACE_MAX_WORD || out->n >= BRACE_MAX_WORDS) {
			r = word_list_add(out, &w[i], w[i].text, w[i].len, "", 0, "", 0);
			continue;
		}
		/* depth first, alternatives pushed in reverse: the output keeps bash's order */
		r = word_list_add(&stack, &w[i], w[i].text, w[i].len, "", 0, "", 0);
		while (r == 0 && stack.n > 0 && out->n < BRACE_MAX_WORDS) {
			cae_sh_word cur = stack.w[--stack.n];
			size_t open = 0, close = 0;
			r = budget > 0 ? find_brace_group(cur.text, cur.len, &open, &close) : 0;
			if (r == 0) {
				/* no group left (or no budget): a finished word */
				r = word_list_add(out, &cur, cur.text, cur.len, "", 0, "", 0);
			} else if (r > 0) {
				r = 0;
				size_t level = 0, end = close;
				for (size_t j = close; j > open && r == 0 && budget > 0; j--) {
					char c = cur.text[j - 1];
					if (c == '}') {
						level++;
					} else if (c == '{' && level > 0) {
						level--;
					} else if ((c == ',' && level == 0) || j - 1 == open) {
						budget--;
						r = word_list_add(&stack, &cur, cur.text, open,
								  cur.text + j, end - j,
								  cur.text + close + 1,
								  cur.len - close - 1);
						end = j - 1;
					}
				}
			}
			free(cur.text);
		}
		/* cut short: the word as written stays too (its flags still count for rm) */
		if (r == 0 && stack.n > 0)
			r = word_list_add(out, &w[i], w[i].text, w[i].len, "", 0, "", 0);
		word_list_free(&stack);
	}
	word_list_free(&stack);
	return r < 0 ? r : 1;
}

static int on_command(const cae_sh_command *cmd, void *userdata)
{
	struct word_list ex = {0};
	int r = expand_braces(cmd->words, cmd->n_words, &ex);
	if (r == 0)
		return analyze(userdata, cmd->words, cmd->n_words, cmd->src, cmd->src_len,
			       cmd->depth);
	if (r > 0)
		r = ex.n ? analyze(userdata, ex.w, ex.n, cmd->src, cmd->src_len, cmd->depth) : 0;
	word_list_free(&ex);
	return r;
}

/* ---- entry points ---- */

int cae_policy_check_n(const cae_policy *p, const char *cmdline, size_t len, cae_policy_verdict *v)
{
	if (!v)
		return -EINVAL;
	verdict_allow(v);
	struct check ck = {.p = p, .v = v};
	if (!p || !cmdline) {
		deny_msg(&ck, CAE_POLICY_RULE_PARSE, NULL, 0, "no command line to check");
		return -EINVAL;
	}
	if (len > p->max_length) {
		deny_msg(&ck, CAE_POLICY_RULE_LIMIT, cmdline, MIN(len, 64),
			 "command line is too long (%zu bytes, at most %zu)", len, p->max_length);
		return 0;
	}
	int r = check_string(&ck, cmdline, len, 0, "the command line", cmdline, len);
	if (r < 0) {
		deny_msg(&ck, CAE_POLICY_RULE_LIMIT, NULL, 0,
			 "the command could not be checked: %s", strerror(-r));
		return r;
	}
	return 0;
}

int cae_policy_check(const cae_policy *p, const char *cmdline, cae_policy_verdict *v)
{
	return cae_policy_check_n(p, cmdline, cmdline ? strlen(cmdline) : 0, v);
}

int cae_policy_check_argv(const cae_policy *p, const char *const *argv, cae_policy_verdict *v)
{
	if (!v)
		return -EINVAL;
	verdict_allow(v);
	struct check ck = {.p = p, .v = v};
	if (!p || !argv) {
		deny_msg(&ck, CAE_POLICY_RULE_PARSE, NULL, 0, "no command to check");
		return -EINVAL;
	}
	size_t n = 0, total = 0;
	for (; argv[n]; n++) {
		total += strlen(argv[n]) + 1;
		if (total > p->max_length) {
			deny_msg(&ck, CAE_POLICY_RULE_LIMIT, argv[0], strlen(argv[0]),
				 "command is too long (more than %zu bytes)", p->max_length);
			return 0;
		}
	}
	if (n == 0) {
		deny_msg(&ck, CAE_POLICY_RULE_PARSE, NULL, 0, "empty command");
		return 0;
	}
	cae_sh_word *w = calloc(n, sizeof(*w));
	char *src = malloc(total);
	if (!w || !src) {
		free(w);
		free(src);
		deny_msg(&ck, CAE_POLICY_RULE_LIMIT, NULL, 0,
			 "the command could not be checked: %s", strerror(ENOMEM));
		return -ENOMEM;
	}
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(argv[i]);
		w[i].text = src + o; /* the words point into the joined text */
		w[i].len = l;
		memcpy(src + o, argv[i], l + 1);
		o += l + 1;
	}
	/* the displayed command: the same bytes with the NULs turned into spaces */
	_cleanup_free_ char *shown = malloc(total);
	int r = -ENOMEM;
	if (shown) {
		memcpy(shown, src, total);
		for (size_t i = 0; i + 1 < total; i++)
			if (shown[i] == '\0')
				shown[i] = ' ';
		r = analyze(&ck, w, n, shown, total - 1, 0);
	}
	free(w);
	free(src);
	if (r < 0) {
		deny_msg(&ck, CAE_POLICY_RULE_LIMIT, NULL, 0,
			 "the command could not be checked: %s", strerror(-r));
		return r;
	}
	return 0;
}
