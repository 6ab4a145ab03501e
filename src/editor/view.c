/* `view`: a file numbered like `cat -n` (a range of it, clipped to the output limit), or a
 * directory listed two levels deep like `find -maxdepth 2`, hidden entries left out, bounded
 * in entries and characters. */
#include "editor-internal.h"

#include "base/buf.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/utf8.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

static const char CLIP_NOTE_FMT[] =
    "<response clipped><NOTE>To save on context only part of this file has been shown to "
    "you: lines %zu-%zu of %zu%s. Use `view_range` to see other lines (e.g. [%zu, -1]), or "
    "search inside the file with `grep -n` to find the line numbers of what you are looking "
    "for.</NOTE>\n";
static const char CLIP_NOTE_CUT_FMT[] =
    "<response clipped><NOTE>To save on context only part of this file has been shown to "
    "you: line %zu is longer than the output limit of %zu characters and was cut. Use a "
    "shell command (e.g. `cut -c1-2000` or `fold`) to read long lines, and `view_range` for "
    "other lines.</NOTE>\n";

int cae__ed_make_output(cae_editor *ed, cae_buf *out, const char *s, size_t n, const char *descr,
			size_t first_no, size_t total_lines, bool strip_cr)
{
	int r = cae__buf_printf(out, "Here's the result of running `cat -n` on %s:\n", descr);
	if (r < 0)
		return r;
	ed_numbered nb;
	r = cae__ed_number_lines(out, s, n, first_no, ed->lim.max_output_chars, strip_cr, &nb);
	if (r < 0)
		return r;
	if (!nb.clipped)
		return 0;
	size_t last = first_no + nb.lines_shown - 1;
	if (nb.line_cut)
		return cae__buf_printf(out, CLIP_NOTE_CUT_FMT, last, ed->lim.max_output_chars);
	return cae__buf_printf(out, CLIP_NOTE_FMT, first_no, last, total_lines, "", last + 1);
}

typedef struct listing {
	cae_editor *ed;
	cae_buf *out;
	size_t chars;
	bool clipped;
	char *capped_dir; /* the first directory with more entries than max_dir_entries */
	size_t capped_total;
	size_t capped_more; /* other such directories */
} listing;

typedef struct dent {
	char *name;
	bool is_dir;
} dent;

static int dent_cmp(const void *a, const void *b)
{
	return strcmp(((const dent *)a)->name, ((const dent *)b)->name);
}

/* A name as shown: valid UTF-8, control characters as '?'. New string. */
static char *display_name(const char *name)
{
	size_t n;
	char *s = cae__utf8_sanitize(name, strlen(name), &n);
	if (!s)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			s[i] = '?';
	return s;
}

static int list_line(listing *ls, const char *path)
{
	size_t len = strlen(path);
	size_t chars = cae__ed_count_chars(path, len) + 1;
	if (ls->chars + chars > ls->ed->lim.max_output_chars) {
		ls->clipped = true;
		return 0;
	}
	ls->chars += chars;
	int r = cae__buf_append(ls->out, path, len);
	return r < 0 ? r : cae__buf_append(ls->out, "\n", 1);
}

static bool dent_is_dir(DIR *d, const struct dirent *de)
{
	if (de->d_type != DT_UNKNOWN)
		return de->d_type == DT_DIR;
	struct stat st;
	return fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

/* Reads the visible entries of d: all of them, or the max_dir_entries first in name order
 * (memory stays bounded for huge directories). Sorted. */
static int read_entries(listing *ls, DIR *d, const char *shown, dent **out, size_t *count)
{
	size_t max = ls->ed->lim.max_dir_entries, n = 0, cap = 0, total = 0;
	dent *ents = NULL;
	bool sorted = false;
	int r = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue; /* ".", "..", hidden */
		total++;
		size_t pos = n;
		if (n == max) {
			/* Full: keep the entry only if it sorts before the current last one. */
			if (!sorted) {
				qsort(ents, n, sizeof(dent), dent_cmp);
				sorted = true;
			}
			if (strcmp(de->d_name, ents[n - 1].name) >= 0)
				continue;
			size_t lo = 0, hi = n - 1;
			while (lo < hi) {
				size_t mid = (lo + hi) / 2;
				if (strcmp(ents[mid].name, de->d_name) < 0)
					lo = mid + 1;
				else
					hi = mid;
			}
			pos = lo;
			free(ents[n - 1].name);
			memmove(ents + pos + 1, ents + pos, (n - 1 - pos) * sizeof(dent));
			n--;
		} else if (n == cap) {
			size_t nc = cap ? cap * 2 : 32;
			if (nc > max)
				nc = max;
			dent *ne = realloc(ents, nc * sizeof(dent));
			if (!ne) {
				r = -ENOMEM;
				break;
			}
			ents = ne;
			cap = nc;
		}
		ents[pos].name = strdup(de->d_name);
		if (!ents[pos].name) {
			if (pos != n)
				memmove(ents + pos, ents + pos + 1, (n - pos) * sizeof(dent));
			r = -ENOMEM;
			break;
		}
		ents[pos].is_dir = dent_is_dir(d, de);
		n++;
	}
	if (r == 0 && !sorted && n > 1)
		qsort(ents, n, sizeof(dent), dent_cmp);
	if (r == 0 && total > n) {
		if (!ls->capped_dir) {
			ls->capped_dir = strdup(shown);
			ls->capped_total = total;
			if (!ls->capped_dir)
				r = -ENOMEM;
		} else {
			ls->capped_more++;
		}
	}
	*out = ents;
	*count = n;
	return r;
}

/* Lists the entries of the directory dfd (consumed), shown as `shown`, depth 1 or 2. */
static int list_dir(listing *ls, int dfd, const char *shown, int depth)
{
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return 0; /* unreadable: listed without entries, like find's stderr-only case */
	}
	dent *ents = NULL;
	size_t n = 0;
	int r = read_entries(ls, d, shown, &ents, &n);
	for (size_t i = 0; r == 0 && i < n && !ls->clipped; i++) {
		_cleanup_free_ char *dn = display_name(ents[i].name);
		_cleanup_free_ char *child = dn ? cae__path_join(shown, dn) : NULL;
		if (!child) {
			r = -ENOMEM;
			break;
		}
		r = list_line(ls, child);
		if (r == 0 && depth < 2 && ents[i].is_dir && !ls->clipped) {
			/* O_NOFOLLOW: a symlink is listed, never descended (find -P). */
			int sub = cae__open_beneath(dirfd(d), ents[i].name,
						    O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
			if (sub >= 0)
				r = list_dir(ls, sub, child, depth + 1);
		}
	}
	for (size_t i = 0; i < n; i++)
		free(ents[i].name);
	free(ents);
	closedir(d);
	return r;
}

static int view_dir(cae_editor *ed, const ed_target *t, cae_editor_result *res)
{
	/* base NULL: dfd is the directory itself */
	int fd = t->base
		     ? cae__open_beneath(t->dfd, t->base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0)
		     : cae__open_beneath(t->dfd, ".", O_RDONLY | O_DIRECTORY, 0);
	if (fd < 0)
		return cae__ed_resolve_error(ed, res, t->display, fd);
	cae_buf out;
	cae__ed_out_init(&out);
	listing ls = {.ed = ed, .out = &out};
	int r = cae__buf_printf(&out,
				"Here's the files and directories up to 2 levels deep in %s, "
				"excluding hidden items:\n",
				t->display);
	if (r == 0)
		r = list_line(&ls, t->display);
	if (r == 0)
		r = list_dir(&ls, fd, t->display, 1);
	else
		close(fd);
	if (r == 0 && ls.clipped)
		r = cae__buf_printf(
		    &out,
		    "<response clipped><NOTE>Only part of this directory listing has "
		    "been shown (the output limit is %zu characters). View a "
		    "subdirectory, or use a shell command such as `find %s -maxdepth 1` "
		    "or `ls`, to see the rest.</NOTE>\n",
		    ed->lim.max_output_chars, t->display);
	if (r == 0 && ls.capped_dir) {
		r = cae__buf_printf(
		    &out,
		    "Note: %s has %zu entries; only the first %zu in name order are "
		    "listed",
		    ls.capped_dir, ls.capped_total, ed->lim.max_dir_entries);
		if (r == 0 && ls.capped_more)
			r = cae__buf_printf(&out, " (%zu more director%s cut the same way)",
					    ls.capped_more,
					    ls.capped_more == 1 ? "y was" : "ies were");
		if (r == 0)
			r = cae__buf_puts(&out, ". Use a shell command such as `ls` to see all.\n");
	}
	free(ls.capped_dir);
	if (r == 0)
		r = cae__buf_append(&out, "\n", 1);
	if (r < 0) {
		cae__buf_clear(&out);
		return r;
	}
	return cae__ed_res_ok(res, cae__buf_steal(&out, NULL),
			      "Directory listing for %s:", t->display);
}

static int view_file(cae_editor *ed, const ed_target *t, const long long *range,
		     cae_editor_result *res)
{
	_cleanup_(cae__ed_loaded_clear) ed_loaded l = ED_LOADED_INIT;
	int r = cae__ed_load_file(ed, t, false, NULL, &l, res);
	if (r != 0)
		return r;
	size_t nlines = cae__ed_count_lines(l.text, l.len);
	size_t first = 1, last = nlines, start_off = 0, end_off = l.len;
	bool clamped = false;
	if (range) {
		long long a = range[0], b = range[1];
		if (nlines == 0) {
			r = cae__ed_res_error(
			    res,
			    "Invalid `view_range`: [%lld, %lld]. The file %s is empty (0 "
			    "lines); view it without `view_range`.",
			    a, b, t->display);
			return r < 0 ? r : 1;
		}
		if (a < 1 || (unsigned long long)a > nlines) {
			r = cae__ed_res_error(
			    res,
			    "Invalid `view_range`: [%lld, %lld]. Its first element `%lld` "
			    "should be within the range of lines of the file: [1, %zu]",
			    a, b, a, nlines);
			return r < 0 ? r : 1;
		}
		if (b != -1 && b < a) {
			r = cae__ed_res_error(
			    res,
			    "Invalid `view_range`: [%lld, %lld]. Its second element `%lld` "
			    "should be larger or equal than its first `%lld`, or -1 for the "
			    "end of the file",
			    a, b, b, a);
			return r < 0 ? r : 1;
		}
		first = (size_t)a;
		if (b == -1 || (unsigned long long)b >= nlines) {
			clamped = b != -1 && (unsigned long long)b > nlines;
			last = nlines;
		} else {
			last = (size_t)b;
		}
		start_off = cae__ed_line_offset(l.text, l.len, first - 1);
		end_off = cae__ed_skip_lines(l.text, l.len, start_off, last - first + 1);
	}
	cae_buf out;
	cae__ed_out_init(&out);
	r = cae__ed_make_output(ed, &out, l.text + start_off, end_off - start_off, t->display,
				first, nlines, l.crlf);
	if (r == 0 && clamped)
		r = cae__buf_printf(
		    &out,
		    "Note: `view_range` [%lld, %lld] goes past the end of the file, "
		    "which has %zu lines; lines %zu-%zu are shown. Use -1 as the second "
		    "element to view up to the end of the file.\n",
		    range[0], range[1], nlines, first, nlines);
	if (r < 0) {
		cae__buf_clear(&out);
		return r;
	}
	return cae__ed_res_ok(res, cae__buf_steal(&out, NULL), "File content:");
}

int cae__ed_do_view(cae_editor *ed, const char *path, size_t plen, const long long *range,
		    cae_editor_result *res)
{
	_cleanup_(cae__ed_target_clear) ed_target t = ED_TARGET_INIT;
	int r = cae__ed_resolve(ed, path, plen, false, &t, res);
	if (r != 0)
		return r < 0 ? r : 0;
	if (!t.exists)
		r = cae__ed_resolve_error(ed, res, t.display, -ENOENT);
	else if (S_ISDIR(t.st.st_mode)) {
		if (range) {
			r = cae__ed_res_error(
			    res, "The `view_range` parameter is not allowed when `path` "
				 "points to a directory.");
			r = r < 0 ? r : 1;
		} else {
			r = view_dir(ed, &t, res);
		}
	} else {
		r = view_file(ed, &t, range, res);
	}
	return r < 0 ? r : 0;
}
