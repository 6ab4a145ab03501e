/* The Markdown form: Markdown with fenced code blocks, in document order.
 *
 *   ```<lang>:<path>  or ```:<path>   file_edit update <path> with the block's text
 *   ```bash ```sh ```shell ```zsh     shell_command run (the whole block is one command)
 *   ```git                            one git_operation per git command (add/commit/...)
 *   ```diff ```patch ```udiff         a unified diff (```diff:<path> for bare @@ hunks)
 *   a block holding "*** Begin Patch" the apply_patch form
 *   anything else                     skipped with a warning
 *
 * Fences are ``` or ~~~ (three or more, up to three spaces of indentation); a block closes
 * at a fence of the same character, at least as long, no more indented than the opening
 * one and without an info string. Inside a file block, inner fences with an info string
 * open nested blocks (a README holding ```bash examples), so their closing fences do not
 * end the file. A block that is never closed is an error: it means the text was cut.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/macro.h"
#include "patch/patch-internal.h"

#include "base/banned.h"

static bool fence_close(const patch_line *l, const patch_fence *open)
{
	size_t i = 0;
	while (i < l->len && l->p[i] == ' ')
		i++;
	if (i > open->indent || i > 3)
		return false;
	size_t run = 0;
	while (i + run < l->len && l->p[i + run] == open->ch)
		run++;
	if (run < open->run)
		return false;
	for (size_t j = i + run; j < l->len; j++)
		if (!cae__patch_is_space(l->p[j]))
			return false;
	return true;
}

/* An inner opening fence that a nesting-aware scan counts. */
static bool fence_inner_open(const patch_line *l, const patch_fence *open)
{
	patch_fence f;
	return cae__patch_fence_open(l, &f) && f.ch == open->ch && f.run >= open->run &&
	       f.indent <= open->indent && f.info_len > 0;
}

/* Finds the closing fence. On success *content_end points at the start of the closing line
 * and *it is positioned after it. budget (nested scans only): lines the scan may still read
 * over the whole document, so that blocks whose nesting never balances cannot make the
 * parse quadratic; when it runs out the plain rule decides. */
static bool find_close(patch_lines *it, const patch_fence *open, size_t *budget,
		       const char **content_end)
{
	patch_lines scan = *it;
	patch_line l;
	size_t depth = 0;
	bool nested = budget != NULL;
	while (cae__patch_lines_next(&scan, &l)) {
		if (nested) {
			if (*budget == 0)
				return false;
			(*budget)--;
		}
		if (fence_close(&l, open)) {
			if (depth == 0) {
				*content_end = l.p;
				*it = scan;
				return true;
			}
			depth--;
		} else if (nested && fence_inner_open(&l, open)) {
			depth++;
		}
	}
	return false;
}

static bool lang_is(const char *lang, size_t n, const char *const *names)
{
	for (; *names; names++)
		if (strlen(*names) == n && strncasecmp(lang, *names, n) == 0)
			return true;
	return false;
}

static const char *const shell_langs[] = {"bash", "sh", "shell", "zsh", NULL};
static const char *const diff_langs[] = {"diff", "patch", "udiff", NULL};

static bool path_ends_with(const char *s, size_t n, const char *suffix)
{
	size_t sl = strlen(suffix);
	return n >= sl && strncasecmp(s + n - sl, suffix, sl) == 0;
}

/* The first non-blank line of a block's content. */
static bool first_content_line(const char *s, size_t n, size_t lineno, patch_line *l,
			       patch_lines *rest)
{
	cae__patch_lines_init(rest, s, n, lineno);
	while (cae__patch_lines_next(rest, l)) {
		const char *t = l->p;
		size_t tn = l->len;
		cae__patch_trim(&t, &tn);
		if (tn)
			return true;
	}
	return false;
}

static int add_file_block(cae_patch *p, const char *lang, size_t lang_len, const char *path,
			  size_t path_len, const char *body, size_t body_len, size_t lineno,
			  cae_error *err)
{
	cae_patch_command *c;
	int r = cae__patch_add_command(p, &c, err);
	if (r < 0)
		return r;
	c->type = CAE_PATCH_FILE_EDIT;
	c->action = CAE_PATCH_UPDATE;
	c->source_line = lineno;
	free(c->target);
	free(c->content);
	c->target = cae__memdup0(path, path_len);
	c->content = cae__memdup0(body, body_len);
	c->content_len = body_len;
	if (!c->target || !c->content)
		return cae_error_set(err, -ENOMEM, "out of memory");
	if (lang_len) {
		c->metadata = json_object();
		if (!c->metadata ||
		    json_object_set_new(c->metadata, "lang", json_stringn(lang, lang_len)) < 0)
			return cae_error_set(err, -ENOMEM, "out of memory");
	}
	return 0;
}

static int add_shell_block(cae_patch *p, const char *lang, size_t lang_len, const char *body,
			   size_t n, size_t lineno, cae_error *err)
{
	while (n && cae__patch_is_space(body[n - 1]))
		n--;
	while (n && (body[0] == '\n' || body[0] == '\r')) {
		body++;
		n--;
	}
	if (n == 0) {
		cae__patch_warn(p, "line %zu: skipped an empty ```%.*s block", lineno,
				(int)lang_len, lang);
		return 0;
	}
	/* Prompts ("$ make") are not part of the command: drop them when every line has one. */
	bool prompts = true;
	patch_lines it;
	patch_line l;
	cae__patch_lines_init(&it, body, n, lineno + 1);
	while (cae__patch_lines_next(&it, &l))
		if (l.len && !cae__patch_starts_with(l.p, l.len, "$ "))
			prompts = false;
	cae_buf b;
	cae__buf_init(&b, n + 1);
	int r = 0; /* the command whole or none: a failed append leaves r negative */
	if (prompts) {
		cae__patch_lines_init(&it, body, n, lineno + 1);
		bool first = true;
		while (cae__patch_lines_next(&it, &l)) {
			if (!first)
				r |= cae__buf_append(&b, "\n", 1);
			first = false;
			if (l.len)
				r |= cae__buf_append(&b, l.p + 2, l.len - 2);
		}
	} else {
		r = cae__buf_append(&b, body, n);
	}
	if (r < 0) {
		cae__buf_clear(&b);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	cae_patch_command *c;
	r = cae__patch_add_command(p, &c, err);
	if (r < 0) {
		cae__buf_clear(&b);
		return r;
	}
	c->type = CAE_PATCH_SHELL_COMMAND;
	c->action = CAE_PATCH_RUN;
	c->source_line = lineno;
	free(c->target);
	c->target = cae__buf_steal(&b, NULL);
	if (!c->target)
		return cae_error_set(err, -ENOMEM, "out of memory");
	c->metadata = json_object();
	if (!c->metadata ||
	    json_object_set_new(c->metadata, "lang", json_stringn(lang, lang_len)) < 0)
		return cae_error_set(err, -ENOMEM, "out of memory");
	return 0;
}

static char *join_words(char **w, size_t n)
{
	cae_buf b;
	cae__buf_init(&b, SIZE_MAX / 2);
	int r = 0;
	for (size_t i = 0; i < n; i++) {
		if (i)
			r |= cae__buf_append(&b, " ", 1);
		r |= cae__buf_puts(&b, w[i]);
	}
	if (r < 0) {
		cae__buf_clear(&b);
		return NULL;
	}
	return cae__buf_steal(&b, NULL);
}

/* One git command (words[0] == "git"). Adds a command or a warning. */
static int add_git_command(cae_patch *p, char **w, size_t n, size_t lineno, cae_error *err)
{
	if (n < 2) {
		cae__patch_warn(p, "line %zu: skipped a bare \"git\" in a ```git block", lineno);
		return 0;
	}
	const char *sub = w[1];
	cae_patch_action action;
	if (strcmp(sub, "add") == 0)
		action = CAE_PATCH_GIT_ADD;
	else if (strcmp(sub, "commit") == 0)
		action = CAE_PATCH_GIT_COMMIT;
	else if (strcmp(sub, "reset") == 0)
		action = CAE_PATCH_GIT_RESET;
	else if (strcmp(sub, "checkout") == 0)
		action = CAE_PATCH_GIT_CHECKOUT;
	else {
		cae__patch_warn(p,
				"line %zu: skipped \"git %s\" in a ```git block (supported: add, "
				"commit, reset, checkout)",
				lineno, sub);
		return 0;
	}
	if ((action == CAE_PATCH_GIT_ADD || action == CAE_PATCH_GIT_CHECKOUT) && n < 3) {
		cae__patch_warn(p, "line %zu: skipped \"git %s\" without arguments", lineno, sub);
		return 0;
	}
	char **args = calloc(n, sizeof(*args));
	size_t nargs = 0;
	cae_buf msg;
	cae__buf_init(&msg, SIZE_MAX / 2);
	int r = args ? 0 : -ENOMEM;
	for (size_t i = 2; i < n && r == 0; i++) {
		const char *a = w[i];
		const char *m = NULL;
		if (action == CAE_PATCH_GIT_COMMIT) {
			size_t al = strlen(a);
			if (strcmp(a, "-m") == 0 || strcmp(a, "--message") == 0) {
				m = i + 1 < n ? w[++i] : "";
			} else if (cae__patch_starts_with(a, al, "--message=")) {
				m = a + 10;
			} else if (al >= 2 && a[0] == '-' && a[1] != '-' && strchr(a, 'm')) {
				/* short flags ending in m: -am "msg", or -m"msg" stuck on */
				const char *mp = strchr(a, 'm');
				if (mp[1]) {
					m = mp + 1;
				} else {
					m = i + 1 < n ? w[++i] : "";
				}
				if (mp > a + 1) {
					char *flags = cae__memdup0(a, (size_t)(mp - a));
					if (!flags)
						r = -ENOMEM;
					else
						args[nargs++] = flags;
				}
			}
		}
		if (m) {
			/* several -m: paragraphs, as git */
			if (msg.len && cae__buf_append(&msg, "\n\n", 2) < 0)
				r = -ENOMEM;
			if (r == 0 && cae__buf_puts(&msg, m) < 0)
				r = -ENOMEM;
			continue;
		}
		if (r == 0 && !(args[nargs++] = strdup(a)))
			r = -ENOMEM;
	}
	cae_patch_command *c = NULL;
	if (r == 0)
		r = cae__patch_add_command(p, &c, err);
	if (r < 0) {
		cae__patch_strv_free(args, nargs);
		cae__buf_clear(&msg);
		return r == -E2BIG ? r : cae_error_set(err, r, "out of memory");
	}
	c->type = CAE_PATCH_GIT_OPERATION;
	c->action = action;
	c->source_line = lineno;
	c->args = args;
	c->nargs = nargs;
	free(c->target);
	free(c->content);
	c->target = join_words(args, nargs);
	c->content = cae__buf_steal(&msg, &c->content_len);
	if (!c->target || !c->content)
		return cae_error_set(err, -ENOMEM, "out of memory");
	return 0;
}

#define GIT_QUOTE_LINES 200

/* The quote state after s[0..n) starting in state q: 0 outside quotes, or the open quote. */
static char quote_scan(const char *s, size_t n, char q)
{
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (q == '\'') {
			if (c == '\'')
				q = 0;
		} else if (c == '\\') {
			i++;
		} else if (q == '"') {
			if (c == '"')
				q = 0;
		} else if (c == '\'' || c == '"') {
			q = c;
		}
	}
	return q;
}

static int add_git_block(cae_patch *p, const char *body, size_t n, size_t lineno, cae_error *err)
{
	patch_lines it;
	patch_line l;
	cae__patch_lines_init(&it, body, n, lineno + 1);
	cae_buf cmd;
	cae__buf_init(&cmd, n + 1);
	int r = 0;
	size_t found = 0;
	while (r == 0 && cae__patch_lines_next(&it, &l)) {
		size_t start_line = l.lineno;
		cmd.len = 0;
		int a = 0; /* a failed append leaves a negative */
		/* backslash-newline continues a command */
		for (;;) {
			if (l.len && l.p[l.len - 1] == '\\') {
				a |= cae__buf_append(&cmd, l.p, l.len - 1);
				a |= cae__buf_append(&cmd, " ", 1);
				if (!cae__patch_lines_next(&it, &l))
					break;
				continue;
			}
			a |= cae__buf_append(&cmd, l.p, l.len);
			break;
		}
		if (a < 0) {
			r = cae_error_set(err, -ENOMEM, "out of memory");
			break;
		}
		const char *s = cmd.data ? cmd.data : "";
		size_t sn = cmd.len;
		cae__patch_trim(&s, &sn);
		if (sn && s[0] == '$' && sn > 1 && s[1] == ' ') {
			s += 2;
			sn -= 2;
		}
		if (sn == 0 || s[0] == '#')
			continue;
		char **w = NULL;
		bool *ops = NULL;
		size_t nw = 0;
		/* a quoted message may span lines: git commit -m "title<NL><NL>body" */
		char open_quote = quote_scan(s, sn, 0);
		for (size_t more = 0;
		     open_quote && more < GIT_QUOTE_LINES && cae__patch_lines_next(&it, &l);
		     more++) {
			size_t at = (size_t)(s - cmd.data);
			a |= cae__buf_append(&cmd, "\n", 1);
			a |= cae__buf_append(&cmd, l.p, l.len);
			s = cmd.data + at;
			sn = cmd.len - at;
			open_quote = quote_scan(l.p, l.len, open_quote);
		}
		if (a < 0) {
			r = cae_error_set(err, -ENOMEM, "out of memory");
			break;
		}
		r = cae__patch_shell_split(s, sn, &w, &ops, &nw);
		if (r == -EINVAL) {
			cae__patch_warn(
			    p, "line %zu: skipped a git command with an unterminated quote",
			    start_line);
			r = 0;
			continue;
		}
		if (r < 0) {
			r = cae_error_set(err, r, "out of memory");
			break;
		}
		/* "git add x && git commit -m y": one operation per simple command */
		size_t b = 0;
		for (size_t i = 0; i <= nw && r == 0; i++) {
			if (i < nw && !ops[i])
				continue;
			if (i > b) {
				if (strcmp(w[b], "git") == 0) {
					r = add_git_command(p, w + b, i - b, start_line, err);
					found++;
				} else {
					char q[128];
					cae__patch_warn(
					    p,
					    "line %zu: skipped \"%s\" in a ```git block (not "
					    "a git command)",
					    start_line,
					    cae__patch_quote(w[b], strlen(w[b]), 60, q, sizeof(q)));
				}
			}
			b = i + 1;
		}
		cae__patch_strv_free(w, nw);
		free(ops);
	}
	cae__buf_clear(&cmd);
	if (r == 0 && found == 0)
		cae__patch_warn(p, "line %zu: skipped a ```git block without git commands", lineno);
	return r;
}

static int handle_block(cae_patch *p, const patch_fence *f, const char *body, size_t n,
			size_t lineno, cae_error *err)
{
	const char *info = f->info;
	size_t info_len = f->info_len;
	const char *colon = memchr(info, ':', info_len);
	const char *lang = info, *path = NULL;
	size_t lang_len = info_len, path_len = 0;
	if (colon) {
		lang_len = (size_t)(colon - info);
		path = colon + 1;
		path_len = info_len - lang_len - 1;
		cae__patch_trim(&path, &path_len);
		cae__patch_trim(&lang, &lang_len);
	} else {
		/* the language is the first word of the info string */
		size_t i = 0;
		while (i < info_len && !cae__patch_is_space(info[i]))
			i++;
		lang_len = i;
	}
	char q[160];
	patch_line first;
	patch_lines rest;
	bool has_first = first_content_line(body, n, lineno + 1, &first, &rest);
	bool begin_patch = has_first && cae__patch_line_is_begin_patch(&first);

	if (path_len) {
		if (memchr(path, '\0', path_len))
			return cae_error_set(err, -EINVAL, "line %zu: path contains a NUL byte",
					     lineno);
		if (lang_is(lang, lang_len, diff_langs) &&
		    !path_ends_with(path, path_len, ".diff") &&
		    !path_ends_with(path, path_len, ".patch")) {
			_cleanup_free_ char *dp = cae__memdup0(path, path_len);
			if (!dp)
				return cae_error_set(err, -ENOMEM, "out of memory");
			if (begin_patch)
				return cae__patch_parse_apply_patch(p, body, n, lineno + 1, err);
			return cae__patch_parse_unified(p, body, n, lineno + 1, dp, err);
		}
		return add_file_block(p, lang, lang_len, path, path_len, body, n, lineno, err);
	}
	if (colon && path_len == 0) {
		cae__patch_warn(p, "line %zu: skipped a ```%s block: the path after ':' is empty",
				lineno, cae__patch_quote(info, info_len, 60, q, sizeof(q)));
		return 0;
	}
	if (begin_patch)
		return cae__patch_parse_apply_patch(p, body, n, lineno + 1, err);
	if (lang_is(lang, lang_len, shell_langs))
		return add_shell_block(p, lang, lang_len, body, n, lineno, err);
	if (lang_len == 3 && strncasecmp(lang, "git", 3) == 0)
		return add_git_block(p, body, n, lineno, err);
	if (lang_is(lang, lang_len, diff_langs) ||
	    (lang_len == 0 && has_first && cae__patch_line_starts_unified(&first, &rest)))
		return cae__patch_parse_unified(p, body, n, lineno + 1, NULL, err);
	if (lang_len == 0)
		cae__patch_warn(p,
				"line %zu: skipped a code block without a language (write "
				"```<lang>:<path> to write a file, ```bash to run a command)",
				lineno);
	else
		cae__patch_warn(
		    p,
		    "line %zu: skipped a ```%s block: no target path (write ```%s:<path> "
		    "to write a file)",
		    lineno, cae__patch_quote(lang, lang_len, 40, q, sizeof(q)),
		    cae__patch_quote(lang, lang_len, 40, q, sizeof(q)));
	return 0;
}

int cae__patch_parse_markdown(cae_patch *p, const char *text, size_t len, size_t first_lineno,
			      cae_error *err)
{
	patch_lines it;
	patch_line l;
	patch_fence f;
	cae__patch_lines_init(&it, text, len, first_lineno);
	/* nested scans may read the document's lines twice over in total */
	size_t budget = 64;
	for (const char *c = text, *e = text + len; c && c < e; budget += 2)
		if ((c = memchr(c, '\n', (size_t)(e - c))))
			c++;
	while (cae__patch_lines_next(&it, &l)) {
		if (!cae__patch_fence_open(&l, &f))
			continue;
		const char *body = it.cur;
		size_t lineno = l.lineno;
		bool file_block = memchr(f.info, ':', f.info_len) != NULL;
		const char *end = NULL;
		bool closed = false;
		if (file_block && budget) {
			patch_lines probe = it;
			if (find_close(&probe, &f, &budget, &end)) {
				it = probe;
				closed = true;
			}
		}
		if (!closed)
			closed = find_close(&it, &f, NULL, &end);
		if (!closed) {
			char q[160];
			return cae_error_set(
			    err, -EINVAL,
			    "line %zu: code block %.*s%s is never closed (the patch "
			    "may be cut short)",
			    lineno, (int)MIN(f.run, 8), f.ch == '`' ? "````````" : "~~~~~~~~",
			    cae__patch_quote(f.info, f.info_len, 60, q, sizeof(q)));
		}
		int r = handle_block(p, &f, body, (size_t)(end - body), lineno, err);
		if (r < 0)
			return r;
	}
	return 0;
}
