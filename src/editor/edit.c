/* The commands that change a file: `create`, `str_replace`, `insert` and `undo_edit`. Each
 * checks its arguments, resolves the path (path.c), reads the file (file.c), builds the new
 * content as pieces of the old one, answers with a numbered snippet, writes atomically and
 * keeps the old content for undo (undo.c). */
#include "editor-internal.h"

#include "base/buf.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/txn.h"
#include "base/utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

#define SNIPPET_LINES 4
#define MAX_LISTED_LINES 50 /* line numbers named in the "multiple occurrences" error */
#define NEW_FILE_MODE 0644

static const char REVIEW_HINT[] =
    "Review the changes and make sure they are as expected. Edit the file again if necessary.";
static const char REVIEW_HINT_INSERT[] =
    "Review the changes and make sure they are as expected (correct indentation, no duplicate "
    "lines, etc). Edit the file again if necessary.";

/* Common checks for commands that edit an existing file. Returns 0, 1 (error set), <0. */
static int check_editable(cae_editor *ed, const ed_target *t, cae_editor_result *res)
{
	if (!t->exists)
		return cae__ed_resolve_error(ed, res, t->display, -ENOENT);
	if (S_ISDIR(t->st.st_mode))
		return cae__ed_refuse_directory(res, t);
	return 0;
}

static int text_arg_check(cae_editor_result *res, const char *name, const char *s, size_t n)
{
	int r;
	if (memchr(s, '\0', n)) {
		r = cae__ed_res_error(
		    res,
		    "Parameter `%s` contains a NUL character; the text editor only writes "
		    "text files.",
		    name);
		return r < 0 ? r : 1;
	}
	if (!cae__utf8_is_valid(s, n)) {
		r = cae__ed_res_error(res, "Parameter `%s` is not valid UTF-8 text.", name);
		return r < 0 ? r : 1;
	}
	return 0;
}

int cae__ed_do_create(cae_editor *ed, const char *path, size_t plen, const char *text, size_t len,
		      cae_editor_result *res)
{
	int r = text_arg_check(res, "file_text", text, len);
	if (r != 0)
		return r < 0 ? r : 0;
	_cleanup_(cae__ed_target_clear) ed_target t = ED_TARGET_INIT;
	if (len > ed->lim.max_file_bytes) {
		r = cae__ed_res_error(
		    res,
		    "Parameter `file_text` is too large (%zu bytes; the limit is %zu "
		    "bytes).",
		    len, ed->lim.max_file_bytes);
		return r < 0 ? r : 0;
	}
	/* missing directories are made in the write's transaction */
	if (ed->wsj && cae__txn_begin(ed->wsj, &ed->create_txn) < 0)
		ed->create_txn = NULL;
	r = cae__ed_resolve_write(ed, path, plen, true, &t, res);
	if (r == 0 && t.exists && S_ISDIR(t.st.st_mode))
		r = cae__ed_refuse_directory(res, &t);
	else if (r == 0 && t.exists) {
		r = cae__ed_res_error(
		    res,
		    "File already exists at: %s. Cannot overwrite files using command "
		    "`create`.",
		    t.display);
		r = r < 0 ? r : 1;
	}
	if (r != 0) {
		cae__txn_abort(TAKE_PTR(ed->create_txn));
		return r < 0 ? r : 0;
	}
	ed_seg s = {text, len};
	uint64_t written = 0;
	r = cae__ed_write_atomic(ed, &t, &s, 1, false, NEW_FILE_MODE, NULL, true,
				 ed->lim.undo_depth ? &written : NULL);
	cae__txn_abort(TAKE_PTR(ed->create_txn)); /* (taken by cae__ed_write_atomic) */
	if (r < 0) {
		r = cae__ed_write_error(res, t.display, r);
		return r < 0 ? r : 0;
	}
	if (cae__ed_undo_push(ed->undo, t.key, NULL, 0, false, written) < 0)
		return -ENOMEM;
	_cleanup_free_ char *msg = NULL;
	if (asprintf(&msg, "File created successfully at: %s", t.display) < 0)
		return -ENOMEM;
	return cae__ed_res_ok(res, TAKE_PTR(msg), "File created: %s", t.display);
}

/* Builds and writes an edit: segments of the new (LF-form) text; keeps the old content for
 * undo. Returns 0, 1 (error set), <0. */
static int commit_edit(cae_editor *ed, const ed_target *t, ed_loaded *l, const ed_seg *segs,
		       size_t nsegs, cae_editor_result *res, bool *undo_kept)
{
	size_t total = 0;
	for (size_t i = 0; i < nsegs; i++)
		total += segs[i].n;
	if (total > ed->lim.max_file_bytes) {
		int r = cae__ed_res_error(
		    res,
		    "No change was made: the edited file %s would be %zu bytes, over "
		    "the limit of %zu bytes.",
		    t->display, total, ed->lim.max_file_bytes);
		return r < 0 ? r : 1;
	}
	uint64_t written = 0;
	int r = cae__ed_write_atomic(ed, t, segs, nsegs, l->crlf, l->st.st_mode, &l->st, false,
				     ed->lim.undo_depth ? &written : NULL);
	if (r < 0)
		return cae__ed_write_error(res, t->display, r);
	if (l->fd >= 0) {
		cae__ed_close_later(l->fd);
		l->fd = -1;
	}
	r = cae__ed_undo_push(ed->undo, t->key, TAKE_PTR(l->raw), l->raw_len, true, written);
	if (r < 0)
		return r;
	*undo_kept = r == 1;
	return 0;
}

static const char UNDO_NOT_KEPT[] =
    "Note: this edit cannot be undone with `undo_edit` (the file is larger than the undo "
    "memory, or undo is disabled).\n";

/* Numbers a snippet built from pieces (pre + mid + post) starting at line first_no. */
static int snippet_output(cae_editor *ed, cae_buf *out, const ed_seg *parts, size_t nparts,
			  const char *descr, size_t first_no)
{
	cae_buf sn;
	cae__buf_init(&sn, SIZE_MAX - 1);
	int r = 0;
	for (size_t i = 0; r == 0 && i < nparts; i++)
		r = cae__buf_append(&sn, parts[i].p, parts[i].n);
	if (r == 0) {
		r = cae__buf_printf(out, "Here's the result of running `cat -n` on %s:\n", descr);
		ed_numbered nb;
		if (r == 0)
			r = cae__ed_number_lines(out, sn.data ? sn.data : "", sn.len, first_no,
						 ed->lim.max_output_chars, false, &nb);
		if (r == 0 && nb.clipped)
			r = cae__buf_puts(out, "<response clipped><NOTE>The snippet was clipped to "
					       "save on context; use `view` with `view_range` to "
					       "see the edited lines.</NOTE>\n");
	}
	cae__buf_clear(&sn);
	return r;
}

/* "Multiple occurrences" error: the line of every occurrence (non-overlapping, like the
 * reference's count), also for a multi-line old_str (the line where each one starts). */
static int multiple_error(cae_editor_result *res, const char *text, size_t len, const char *old,
			  size_t olen, size_t first)
{
	cae_buf lines;
	cae__buf_init(&lines, 1 << 16);
	size_t listed = 0, line = 1, counted = 0, last_line = 0;
	int r = cae__buf_puts(&lines, "[");
	for (size_t pos = first; r == 0;) {
		line += cae__ed_count_newlines(text + counted, pos - counted);
		counted = pos;
		if (line != last_line) {
			if (listed < MAX_LISTED_LINES)
				r = cae__buf_printf(&lines, "%s%zu", listed ? ", " : "", line);
			listed++;
			last_line = line;
		}
		const char *next = memmem(text + pos + olen, len - pos - olen, old, olen);
		if (!next)
			break;
		pos = (size_t)(next - text);
	}
	if (r == 0 && listed > MAX_LISTED_LINES)
		r = cae__buf_printf(&lines, ", ... (%zu lines in all)", listed);
	if (r == 0)
		r = cae__buf_puts(&lines, "]");
	_cleanup_free_ char *echo = cae__ed_echo_str(old, olen);
	if (r == 0 && echo)
		r = cae__ed_res_error(
		    res,
		    "No replacement was performed. Multiple occurrences of old_str `%s` "
		    "in lines %s%s. Please ensure it is unique: include more of the "
		    "surrounding lines in old_str.",
		    echo, lines.data,
		    memchr(old, '\n', olen) ? " (the line where each occurrence starts)" : "");
	else if (r == 0)
		r = -ENOMEM;
	cae__buf_clear(&lines);
	return r < 0 ? r : 1;
}

/* "No match" error, with the line of a match that differs only in whitespace if any. */
static int nomatch_error(cae_editor_result *res, const ed_target *t, const char *text, size_t len,
			 const char *old, size_t olen)
{
	ed_ws_match m[MAX_LISTED_LINES];
	bool gave_up;
	size_t found = cae__ed_ws_find(text, len, old, olen, m, MAX_LISTED_LINES, &gave_up);
	cae_buf hint;
	cae__buf_init(&hint, 1 << 16);
	int r = 0;
	if (found == 1) {
		if (m[0].first_line == m[0].last_line)
			r = cae__buf_printf(&hint, "at line %zu", m[0].first_line);
		else
			r = cae__buf_printf(&hint, "at lines %zu-%zu", m[0].first_line,
					    m[0].last_line);
		if (r == 0)
			r = cae__buf_puts(&hint,
					  ". View those lines and copy them exactly into old_str, "
					  "whitespace included.");
	} else if (found > 1) {
		r = cae__buf_puts(&hint, "at lines [");
		size_t shown = found < MAX_LISTED_LINES ? found : MAX_LISTED_LINES;
		for (size_t i = 0; r == 0 && i < shown; i++)
			r = cae__buf_printf(&hint, "%s%zu", i ? ", " : "", m[i].first_line);
		if (r == 0 && found > shown)
			r = cae__buf_printf(&hint, ", ... (%zu in all)", found);
		if (r == 0)
			r = cae__buf_puts(&hint,
					  "]. View those lines, copy the one you mean exactly "
					  "into old_str, whitespace included, with enough "
					  "surrounding lines to make it unique.");
	}
	_cleanup_free_ char *echo = cae__ed_echo_str(old, olen);
	if (r == 0 && !echo)
		r = -ENOMEM;
	if (r == 0 && found == 0)
		r = cae__ed_res_error(
		    res,
		    "No replacement was performed, old_str `%s` did not appear verbatim "
		    "in %s.",
		    echo, t->display);
	else if (r == 0)
		r = cae__ed_res_error(
		    res,
		    "No replacement was performed, old_str `%s` did not appear verbatim "
		    "in %s. %s that differ%s from it only in whitespace (indentation, tabs "
		    "or spaces, line endings, trailing spaces) %s found %s",
		    echo, t->display, found == 1 ? "A match" : "Matches", found == 1 ? "s" : "",
		    found == 1 ? "was" : "were", hint.data);
	cae__buf_clear(&hint);
	return r < 0 ? r : 1;
}

/* For a CRLF file: old_str/new_str with "\r\n" as "\n" (a new copy in *owned if changed). */
static int to_lf(bool crlf, const char **s, size_t *n, char **owned)
{
	*owned = NULL;
	if (!crlf || !memchr(*s, '\r', *n))
		return 0;
	*owned = cae__ed_crlf_to_lf(*s, *n, n);
	if (!*owned)
		return -ENOMEM;
	*s = *owned;
	return 0;
}

static int finish_edit_output(cae_buf *out, const char *hint, bool undo_kept)
{
	int r = cae__buf_puts(out, hint);
	if (r == 0 && !undo_kept)
		r = cae__buf_printf(out, "\n%s", UNDO_NOT_KEPT);
	return r;
}

int cae__ed_do_str_replace(cae_editor *ed, const char *path, size_t plen, const char *old,
			   size_t olen, const char *new, size_t nlen, cae_editor_result *res)
{
	int r;
	if (!new) {
		new = "";
		nlen = 0;
	}
	if (olen == 0) {
		r = cae__ed_res_error(res,
				      "Parameter `old_str` must not be empty: it must be the exact "
				      "text to replace, whitespace and indentation included.");
		return r < 0 ? r : 0;
	}
	if ((r = text_arg_check(res, "old_str", old, olen)) != 0 ||
	    (r = text_arg_check(res, "new_str", new, nlen)) != 0)
		return r < 0 ? r : 0;
	if (olen == nlen && memcmp(old, new, olen) == 0) {
		r = cae__ed_res_error(res,
				      "No replacement was performed: `old_str` and `new_str` are "
				      "identical, so the file would not change.");
		return r < 0 ? r : 0;
	}
	_cleanup_(cae__ed_target_clear) ed_target t = ED_TARGET_INIT;
	r = cae__ed_resolve_write(ed, path, plen, false, &t, res);
	if (r != 0)
		return r < 0 ? r : 0;
	if ((r = check_editable(ed, &t, res)) != 0)
		return r < 0 ? r : 0;
	/* old_str is searched while the file is read; that result stands unless the file is
	 * CRLF (it is then searched again, in LF form). */
	ed_search se;
	cae__ed_search_init(&se, old, olen);
	_cleanup_(cae__ed_loaded_clear) ed_loaded l = ED_LOADED_INIT;
	if ((r = cae__ed_load_file(ed, &t, true, &se, &l, res)) != 0)
		return r < 0 ? r : 0;
	_cleanup_free_ char *old_own = NULL, *new_own = NULL;
	if (to_lf(l.crlf, &old, &olen, &old_own) < 0 || to_lf(l.crlf, &new, &nlen, &new_own) < 0)
		return -ENOMEM;
	if (olen == nlen && memcmp(old, new, olen) == 0) {
		r = cae__ed_res_error(res,
				      "No replacement was performed: `old_str` and `new_str` only "
				      "differ in line endings, so the file would not change.");
		return r < 0 ? r : 0;
	}
	const char *text = l.text;
	size_t len = l.len;
	if (l.crlf) {
		cae__ed_search_init(&se, old, olen);
		cae__ed_search_feed(&se, text, len);
	}
	if (se.first == SIZE_MAX) {
		r = nomatch_error(res, &t, text, len, old, olen);
		return r < 0 ? r : 0;
	}
	size_t off = se.first;
	if (se.second != SIZE_MAX) {
		r = multiple_error(res, text, len, old, olen, off);
		return r < 0 ? r : 0;
	}

	/* The answer first (it reads the old text, which goes to the undo history). */
	size_t line0 = se.newlines;
	size_t pre = cae__ed_back_lines(text, off, SNIPPET_LINES);
	size_t first_no = line0 - cae__ed_count_newlines(text + pre, off - pre) + 1;
	size_t post_end = cae__ed_skip_lines(text, len, off + olen, SNIPPET_LINES + 1);
	ed_seg parts[3] = {
	    {text + pre, off - pre},
	    {new, nlen},
	    {text + off + olen, post_end - off - olen},
	};
	cae_buf out;
	cae__ed_out_init(&out);
	_cleanup_free_ char *descr = NULL;
	if (asprintf(&descr, "a snippet of %s", t.display) < 0)
		return -ENOMEM;
	r = cae__buf_printf(&out, "The file %s has been edited. ", t.display);
	if (r == 0)
		r = snippet_output(ed, &out, parts, 3, descr, first_no);
	if (r < 0) {
		cae__buf_clear(&out);
		return r;
	}
	ed_seg segs[3] = {
	    {text, off},
	    {new, nlen},
	    {text + off + olen, len - off - olen},
	};
	bool kept = false;
	r = commit_edit(ed, &t, &l, segs, 3, res, &kept);
	if (r == 0)
		r = finish_edit_output(&out, REVIEW_HINT, kept);
	if (r != 0) {
		cae__buf_clear(&out);
		return r < 0 ? r : 0;
	}
	return cae__ed_res_ok(res, cae__buf_steal(&out, NULL), "Successfully replaced text in %s",
			      t.display);
}

int cae__ed_do_insert(cae_editor *ed, const char *path, size_t plen, long long line,
		      const char *new, size_t nlen, cae_editor_result *res)
{
	int r = text_arg_check(res, "new_str", new, nlen);
	if (r != 0)
		return r < 0 ? r : 0;
	_cleanup_(cae__ed_target_clear) ed_target t = ED_TARGET_INIT;
	r = cae__ed_resolve_write(ed, path, plen, false, &t, res);
	if (r != 0)
		return r < 0 ? r : 0;
	if ((r = check_editable(ed, &t, res)) != 0)
		return r < 0 ? r : 0;
	_cleanup_(cae__ed_loaded_clear) ed_loaded l = ED_LOADED_INIT;
	if ((r = cae__ed_load_file(ed, &t, true, NULL, &l, res)) != 0)
		return r < 0 ? r : 0;
	const char *text = l.text;
	size_t len = l.len;
	size_t nlines = cae__ed_count_lines(text, len);
	if (line < 0 || (unsigned long long)line > nlines) {
		r = cae__ed_res_error(
		    res,
		    "Invalid `insert_line` parameter: %lld. It should be within the range "
		    "of lines of the file: [0, %zu] (0 inserts at the top, %zu after the "
		    "last line)",
		    line, nlines, nlines);
		return r < 0 ? r : 0;
	}
	_cleanup_free_ char *new_own = NULL;
	if (to_lf(l.crlf, &new, &nlen, &new_own) < 0)
		return -ENOMEM;
	size_t L = (size_t)line;
	bool ends_nl = len == 0 || text[len - 1] == '\n';
	bool new_ends_nl = nlen > 0 && new[nlen - 1] == '\n';
	ed_seg segs[4];
	size_t nsegs;
	ed_seg parts[5];
	size_t nparts;
	if (L == nlines && !ends_nl) {
		/* After an unterminated last line: it gets its "\n", the file stays without a
		 * final newline. */
		size_t body = new_ends_nl ? nlen - 1 : nlen;
		size_t pre = cae__ed_back_lines(text, len, SNIPPET_LINES - 1);
		segs[0] = (ed_seg){text, len};
		segs[1] = (ed_seg){"\n", 1};
		segs[2] = (ed_seg){new, body};
		nsegs = 3;
		parts[0] = (ed_seg){text + pre, len - pre};
		parts[1] = (ed_seg){"\n", 1};
		parts[2] = (ed_seg){new, body};
		nparts = 3;
	} else {
		size_t off = cae__ed_line_offset(text, len, L);
		size_t pre = cae__ed_back_lines(text, off, SNIPPET_LINES);
		size_t post = cae__ed_skip_lines(text, len, off, SNIPPET_LINES);
		segs[0] = (ed_seg){text, off};
		segs[1] = (ed_seg){new, nlen};
		segs[2] = (ed_seg){"\n", new_ends_nl ? 0 : 1};
		segs[3] = (ed_seg){text + off, len - off};
		nsegs = 4;
		parts[0] = (ed_seg){text + pre, off - pre};
		parts[1] = segs[1];
		parts[2] = segs[2];
		parts[3] = (ed_seg){text + off, post - off};
		nparts = 4;
	}
	size_t first_no = L >= SNIPPET_LINES ? L - SNIPPET_LINES + 1 : 1;
	cae_buf out;
	cae__ed_out_init(&out);
	r = cae__buf_printf(&out, "The file %s has been edited. ", t.display);
	if (r == 0)
		r = snippet_output(ed, &out, parts, nparts, "a snippet of the edited file",
				   first_no);
	if (r < 0) {
		cae__buf_clear(&out);
		return r;
	}
	bool kept = false;
	r = commit_edit(ed, &t, &l, segs, nsegs, res, &kept);
	if (r == 0)
		r = finish_edit_output(&out, REVIEW_HINT_INSERT, kept);
	if (r != 0) {
		cae__buf_clear(&out);
		return r < 0 ? r : 0;
	}
	return cae__ed_res_ok(res, cae__buf_steal(&out, NULL),
			      "Successfully inserted text after line %lld in %s", line, t.display);
}

/* Whether t still holds what the editor wrote (ed_hash `written`). Returns 0 (it does), 1 (it
 * changed or is gone), or -ENOMEM. */
static int changed_since(cae_editor *ed, const ed_target *t, uint64_t written)
{
	if (!t->exists || !S_ISREG(t->st.st_mode) ||
	    (unsigned long long)t->st.st_size > ed->lim.max_file_bytes)
		return 1;
	_cleanup_close_ int fd =
	    openat(t->dfd, t->base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return 1;
	char *buf = NULL;
	size_t n = 0;
	int r = cae__read_fd(fd, ed->lim.max_file_bytes, &buf, &n);
	if (r == -ENOMEM)
		return r;
	if (r < 0)
		return 1;
	ed_hash hs;
	cae__ed_hash_init(&hs);
	cae__ed_hash_feed(&hs, buf, n);
	cae__ed_spare_put(ed, buf);
	return cae__ed_hash_final(&hs) == written ? 0 : 1;
}

int cae__ed_do_undo(cae_editor *ed, const char *path, size_t plen, cae_editor_result *res)
{
	_cleanup_(cae__ed_target_clear) ed_target t = ED_TARGET_INIT;
	int r = cae__ed_resolve_write(ed, path, plen, false, &t, res);
	if (r != 0)
		return r < 0 ? r : 0;
	if (t.exists && S_ISDIR(t.st.st_mode)) {
		r = cae__ed_refuse_directory(res, &t);
		return r < 0 ? r : 0;
	}
	if (t.exists && !S_ISREG(t.st.st_mode)) {
		r = cae__ed_refuse_special(res, &t);
		return r < 0 ? r : 0;
	}
	char *data = NULL;
	size_t len = 0;
	bool existed = false;
	uint64_t written = 0;
	if (cae__ed_undo_pop(ed->undo, t.key, &data, &len, &existed, &written) == 0) {
		r = cae__ed_res_error(res, "No edit history found for %s.", t.display);
		return r < 0 ? r : 0;
	}
	/* Only what the edit wrote is undone: a change made since (a command, another process)
	 * would be lost without a word. The entry stays for when the file is back. */
	int c = changed_since(ed, &t, written);
	if (c != 0) {
		if (cae__ed_undo_push(ed->undo, t.key, data, len, existed, written) < 0 || c < 0)
			return -ENOMEM;
		if (!t.exists)
			r = cae__ed_res_error(
			    res,
			    "%s was removed since the last edit (by a command or another "
			    "process); undo_edit would bring back an older version and "
			    "discard that removal. Nothing was changed; use `create` to "
			    "write the file again.",
			    t.display);
		else
			r = cae__ed_res_error(
			    res,
			    "%s changed since the last edit (by a command or another "
			    "process); undo_edit would discard that change. Nothing was "
			    "changed: view the file and edit it instead.",
			    t.display);
		return r < 0 ? r : 0;
	}
	if (!existed) {
		if (t.exists && unlinkat(t.dfd, t.base, 0) < 0 && errno != ENOENT) {
			int e = -errno;
			if (cae__ed_undo_push(ed->undo, t.key, NULL, 0, false, written) < 0)
				return -ENOMEM;
			r = cae__ed_write_error(res, t.display, e);
			return r < 0 ? r : 0;
		}
		_cleanup_free_ char *msg = NULL;
		if (asprintf(&msg,
			     "Last edit to %s undone successfully. The file did not exist before "
			     "it was created with `create`, so it has been removed.",
			     t.display) < 0)
			return -ENOMEM;
		return cae__ed_res_ok(res, TAKE_PTR(msg), "Successfully reverted last edit to %s",
				      t.display);
	}
	ed_seg s = {data, len};
	r = cae__ed_write_atomic(ed, &t, &s, 1, false, t.exists ? t.st.st_mode : NEW_FILE_MODE,
				 t.exists ? &t.st : NULL, false, NULL);
	if (r < 0) {
		/* Keep the entry: the agent may retry. */
		if (cae__ed_undo_push(ed->undo, t.key, data, len, true, written) < 0)
			return -ENOMEM;
		r = cae__ed_write_error(res, t.display, r);
		return r < 0 ? r : 0;
	}
	cae_buf out;
	cae__ed_out_init(&out);
	r = cae__buf_printf(&out, "Last edit to %s undone successfully. ", t.display);
	if (r == 0)
		r = cae__ed_make_output(ed, &out, data, len, t.display, 1,
					cae__ed_count_lines(data, len), cae__ed_is_crlf(data, len));
	cae__ed_spare_put(ed, data);
	if (r < 0) {
		cae__buf_clear(&out);
		return r;
	}
	return cae__ed_res_ok(res, cae__buf_steal(&out, NULL),
			      "Successfully reverted last edit to %s", t.display);
}
