/* Internals of the text editor (src/editor/), one file per concern:
 *   editor.c  the editor object, its spare buffer, results, the typed entry points
 *   args.c    cae_editor_call: the JSON arguments and the dispatch to a command
 *   path.c    the agent's path to a target in the workspace (through base/chase.h)
 *   file.c    reading a file as text, writing one atomically
 *   view.c    `view` of a file or a directory
 *   edit.c    `create`, `str_replace`, `insert`, `undo_edit`
 *   text.c    text scanning, search and numbering
 *   undo.c    the bounded undo history
 * Not installed. */
#ifndef CAE_EDITOR_INTERNAL_H
#define CAE_EDITOR_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "base/chase.h"
#include "base/macro.h"
#include "base/txn.h"
#include "cae/editor.h"

/* ---- text.c ---- */

typedef struct ed_text_info {
	size_t nul_at; /* offset of the first NUL byte, SIZE_MAX if none */
	size_t bad_at; /* offset of the first invalid UTF-8 sequence, SIZE_MAX if none */
	bool has_cr;   /* some "\r" (only meaningful when the text is valid) */
} ed_text_info;

/* One pass over s: NUL bytes, UTF-8 validity, presence of "\r". Word-at-a-time for ASCII. */
void cae__ed_text_scan(const char *s, size_t n, ed_text_info *info);

/* The same check made piece by piece while a file is read, each piece while it is still in
 * the cache. */
typedef struct ed_scan {
	size_t pos; /* bytes checked so far */
	ed_text_info info;
} ed_scan;

void cae__ed_scan_init(ed_scan *sc);
/* Checks the text s[0..avail) as far as it has not been checked yet: s is the text read so far
 * (each call with the same bytes, and more; the buffer may have moved). Without final, a
 * multi-byte sequence that may go on past avail is left for the next call. After a call with
 * final, sc->info is what cae__ed_text_scan(s, avail) gives. */
void cae__ed_scan_feed(ed_scan *sc, const char *s, size_t avail, bool final);

/* Offset of the first occurrence of needle (m bytes) in hay[from..n), the one memmem would
 * find, or SIZE_MAX. SSE2: candidates by first and last byte 64 positions at a time, memmem
 * when near-misses make that slow (never worse than linear time plus a bounded extra). */
size_t cae__ed_find(const char *hay, size_t n, size_t from, const char *needle, size_t m);

/* Finding the only occurrence of a needle (m >= 1 bytes) piece by piece while a file is read:
 * the first occurrence, the next one that does not overlap it, and the number of "\n" before
 * the first. needle is borrowed until the search is over. */
typedef struct ed_search {
	const char *needle;
	size_t m;
	size_t next;	 /* no occurrence not yet reported starts before next */
	size_t first;	 /* SIZE_MAX: none (yet) */
	size_t second;	 /* from first + m on; SIZE_MAX: none (yet) */
	size_t newlines; /* "\n" bytes in [0, counted) */
	size_t counted;	 /* == first once the search is over and first was found */
} ed_search;

void cae__ed_search_init(ed_search *se, const char *needle, size_t m);
/* Searches the text s[0..avail) as far as not searched yet (same rules as cae__ed_scan_feed). */
void cae__ed_search_feed(ed_search *se, const char *s, size_t avail);
/* Number of "\n" bytes in s[0..n). */
size_t cae__ed_count_newlines(const char *s, size_t n);
/* Number of lines in the editor's line model (a final "\n" ends the last line). */
size_t cae__ed_count_lines(const char *s, size_t n);
/* Offset of the start of 0-based line `idx`; n when the text has fewer lines. */
size_t cae__ed_line_offset(const char *s, size_t n, size_t idx);
/* Offset just after the `count`-th "\n" at or after `from`, or n if there are fewer. */
size_t cae__ed_skip_lines(const char *s, size_t n, size_t from, size_t count);
/* Start of the line `back` lines before the line containing `off` (0: that line's start). */
size_t cae__ed_back_lines(const char *s, size_t off, size_t back);
/* True if s has at least one "\n" and every "\n" follows a "\r". */
bool cae__ed_is_crlf(const char *s, size_t n);
/* New copy with every "\r\n" turned into "\n". NULL on allocation failure. */
char *cae__ed_crlf_to_lf(const char *s, size_t n, size_t *out_len);
/* Appends s to out with every "\n" written as "\r\n". */
int cae__ed_lf_to_crlf(cae_buf *out, const char *s, size_t n);

typedef struct ed_numbered {
	size_t lines_shown; /* lines written (a cut line counts) */
	bool clipped;	    /* stopped before the end of s */
	bool line_cut;	    /* the last line written was cut */
} ed_numbered;

/* Appends s to out numbered like `cat -n` ("%6zu\t" + line + "\n"), the first line numbered
 * first_no. Stops at whole lines once the output would exceed max_chars characters (a single
 * line that alone exceeds it is cut at a character boundary). A trailing "\r" of each line is
 * left out when strip_cr. Returns 0 or -ENOMEM. */
int cae__ed_number_lines(cae_buf *out, const char *s, size_t n, size_t first_no, size_t max_chars,
			 bool strip_cr, ed_numbered *res);

typedef struct ed_ws_match {
	size_t first_line; /* 1-based */
	size_t last_line;
} ed_ws_match;

/* Occurrences of needle in hay when whitespace (space, tab, CR, LF, VT, FF) is ignored on both
 * sides. Writes up to max_out matches to out and returns how many were found (stops counting
 * after a work budget; *gave_up then set). 0 when the needle is only whitespace. */
size_t cae__ed_ws_find(const char *hay, size_t n, const char *needle, size_t m, ed_ws_match *out,
		       size_t max_out, bool *gave_up);

/* Characters (UTF-8 sequences) in valid UTF-8. */
size_t cae__ed_count_chars(const char *s, size_t n);

/* ---- path.c ---- */

/* Normalises display_root (absolute) into a new string without trailing slashes ("/" stays),
 * ".." folded. NULL if it is not absolute, folds above "/", or on allocation failure. */
char *cae__ed_path_root_normalize(const char *display_root);

typedef enum ed_path_error {
	ED_PATH_OK = 0,
	ED_PATH_EMPTY,
	ED_PATH_TOO_LONG,
	ED_PATH_NUL,
	ED_PATH_NOT_UTF8,
	ED_PATH_OUTSIDE, /* absolute and not under the display root */
	ED_PATH_NOMEM,
} ed_path_error;

#define ED_PATH_MAX CAE_PATH_MAX

/* Turns the agent's path into a workspace-relative path (cae__path_lexical: empty and "."
 * components dropped, ".." kept for the resolver to judge, "" for the workspace itself);
 * also the display form's tail. An absolute path must start with the display root's
 * components. *rel is new. */
ed_path_error cae__ed_path_to_rel(const char *root, const char *path, size_t len, char **rel);
/* root + "/" + rel (root alone for ""). New string, NULL on allocation failure. */
char *cae__ed_path_display(const char *root, const char *rel);

/* A path resolved in the workspace. */
typedef struct ed_target {
	char *display; /* the agent's path in display form (what outputs echo) */
	char *key;     /* the undo key: the parent directory's identity and the name, or the
			* path of a directory */
	char *dir;     /* dfd's path relative to the workspace ("" for it), when base is set */
	int dfd;       /* parent directory (O_PATH) beneath the workspace, or the target
			* directory itself when base is NULL */
	char *base;    /* final name in dfd; NULL when the target is a directory named by the
			* workspace itself, a trailing "/" or a final ".." */
	bool exists;
	struct stat st; /* when exists (a final symbolic link is resolved) */
} ed_target;

#define ED_TARGET_INIT                                                                             \
	{                                                                                          \
		.dfd = -1                                                                          \
	}

void cae__ed_target_clear(ed_target *t);
/* Resolves the agent's path (len bytes) with cae__chase; with create, missing parent
 * directories are made (in ed->create_txn when set). res->path names the target. Returns 0
 * (t filled), 1 (error result set), or -ENOMEM. */
int cae__ed_resolve(cae_editor *ed, const char *path, size_t len, bool create, ed_target *t,
		    cae_editor_result *res);
/* cae__ed_resolve for a write (create, str_replace, insert, undo_edit): a target at or below a
 * protected path is refused (the result says why) before any directory is made. */
int cae__ed_resolve_write(cae_editor *ed, const char *path, size_t len, bool create, ed_target *t,
			  cae_editor_result *res);
/* The error result for a failed resolution or access (-errno e) of display. Returns 1, or
 * -ENOMEM. */
int cae__ed_resolve_error(cae_editor *ed, cae_editor_result *res, const char *display, int e);

/* ---- undo.c ---- */

typedef struct ed_undo ed_undo;

ed_undo *cae__ed_undo_new(unsigned depth, size_t budget);
void cae__ed_undo_free(ed_undo *u);
/* Records the content a file had before an edit. data (may be NULL when !existed) is stolen
 * in every case. Returns 1 if kept, 0 if not (undo disabled, or larger than the budget),
 * -ENOMEM. */
/* written: ed_hash of what the edit wrote (what the file must still hold for an undo). */
int cae__ed_undo_push(ed_undo *u, const char *key, char *data, size_t len, bool existed,
		      uint64_t written);
/* Takes the newest entry of key. Returns 1 with *data (owned), *len, *existed, *written; 0
 * when there is none. */
int cae__ed_undo_pop(ed_undo *u, const char *key, char **data, size_t *len, bool *existed,
		     uint64_t *written);

/* A 64-bit hash of a byte stream fed in pieces (the same for any split). Not cryptographic:
 * it tells whether a file still holds what the editor wrote. */
typedef struct ed_hash {
	uint64_t h;
	uint64_t total;
	unsigned char buf[8];
	size_t nbuf;
} ed_hash;

void cae__ed_hash_init(ed_hash *hs);
void cae__ed_hash_feed(ed_hash *hs, const void *data, size_t n);
uint64_t cae__ed_hash_final(const ed_hash *hs);
size_t cae__ed_undo_bytes(const ed_undo *u);
/* The data the history lets go of (entries dropped for the depth or the budget, data pushed
 * but not kept) goes to release(ctx, data), which then owns it, instead of free(). */
void cae__ed_undo_set_release(ed_undo *u, void (*release)(void *ctx, char *data), void *ctx);

/* ---- editor.c ---- */

struct cae_editor {
	int root_fd; /* O_PATH | O_DIRECTORY */
	char *root;  /* display root, normalised */
	/* The workspace's journal (base/txn.h): every write is a transaction, so a process
	 * killed mid-write leaves no staged file once recovered. NULL when the journal
	 * directory cannot be made (writes are then plain temporary file + rename). */
	cae_wsj *wsj;
	/* The transaction of the `create` being run (its directories are made in it, so that a
	 * crash or a failure removes them again), else NULL. */
	cae_txn *create_txn;
	cae_editor_limits lim; /* lim.protected_paths points at protected below */
	char **protected;      /* owned copy of the limits' protected paths */
	ed_undo *undo;
	pthread_mutex_t lock;
	/* The latest large buffer let go of (an undo entry dropped, a failed edit's file), for
	 * the next read of a file of about its size: faulting fresh pages in costs more than
	 * reading the file (10 MB: ~6 ms against ~2-4 ms). At most one, of at most
	 * max_file_bytes plus a little. */
	char *spare;
	size_t spare_cap;
};

/* Buffers from this size on are kept for reuse, and allocated with room to grow. */
#define ED_SPARE_MIN ((size_t)1 << 20)

/* Takes data (may be NULL): kept as the spare if large, else freed. */
void cae__ed_spare_put(cae_editor *ed, char *data);
/* A buffer of at least need bytes (the spare when its size fits). NULL on failure. */
char *cae__ed_buf_get(cae_editor *ed, size_t need);

/* Sets a tool error. Returns 0, or -ENOMEM. */
int cae__ed_res_error(cae_editor_result *res, const char *fmt, ...) _printf_(2, 3);
/* Sets a success: text is stolen, summary formatted. Returns 0, or -ENOMEM. */
int cae__ed_res_ok(cae_editor_result *res, char *text, const char *fmt, ...) _printf_(3, 4);
/* s as echoed in an error: at most ECHO_MAX_CHARS characters. New string. */
char *cae__ed_echo_str(const char *s, size_t n);
/* An output buffer (uncapped: outputs are bounded by max_output_chars as they are made). */
void cae__ed_out_init(cae_buf *b);

/* ---- args.c ---- */

/* ---- file.c ---- */

/* A text file read for viewing or editing. */
typedef struct ed_loaded {
	cae_editor *ed;
	int fd;	   /* a large file stays open until its edit is written: see cae__ed_close_later */
	char *raw; /* the file's bytes */
	size_t raw_len;
	char *conv;	  /* LF copy of a CRLF file, else NULL */
	const char *text; /* raw or conv */
	size_t len;
	bool crlf;
	struct stat st;
} ed_loaded;

#define ED_LOADED_INIT                                                                             \
	{                                                                                          \
		.fd = -1                                                                           \
	}

void cae__ed_loaded_clear(ed_loaded *l);
/* Opens and reads the regular file t (which exists). Returns 0, 1 (error set) or -ENOMEM.
 * With want_lf, a CRLF file is also converted for editing. With search (may be NULL), the
 * raw bytes are searched as they are read (the result is only meaningful when the file turns
 * out valid and not CRLF). */
int cae__ed_load_file(cae_editor *ed, const ed_target *t, bool want_lf, ed_search *search,
		      ed_loaded *l, cae_editor_result *res);
/* Closes fd on a short-lived thread of its own (the old version of a large file an edit
 * has just replaced: the kernel frees its pages then, not while the agent waits). */
void cae__ed_close_later(int fd);

/* A piece of a file's new content. */
typedef struct ed_seg {
	const char *p;
	size_t n;
} ed_seg;

/* Writes the concatenation of segs to t (dfd/base) atomically: as a transaction of the
 * workspace's journal when there is one (ed->create_txn first), else with base/fs.h's
 * cae__write_atomic. With noreplace, only if base does not exist. mode is applied; with
 * owner, its uid/gid are kept where we can. With crlf, every "\n" is written as "\r\n".
 * hash (may be NULL) gets the ed_hash of the bytes written. Returns 0 or -errno. */
int cae__ed_write_atomic(cae_editor *ed, const ed_target *t, const ed_seg *segs, size_t nsegs,
			 bool crlf, mode_t mode, const struct stat *owner, bool noreplace,
			 uint64_t *hash);
/* The error result for a failed write. Returns 1, or -ENOMEM. */
int cae__ed_write_error(cae_editor_result *res, const char *display, int e);
/* The refusals shared by the commands that take a file: a directory (only `view` lists
 * one) and anything but a regular file. Return 1 (error result set) or -ENOMEM. */
int cae__ed_refuse_directory(cae_editor_result *res, const ed_target *t);
int cae__ed_refuse_special(cae_editor_result *res, const ed_target *t);

/* ---- view.c ---- */

int cae__ed_do_view(cae_editor *ed, const char *path, size_t plen, const long long *range,
		    cae_editor_result *res);
/* "Here's the result of running `cat -n` on {descr}:\n" + numbered s, clipped with a note.
 * total_lines is the file's line count (for the note). */
int cae__ed_make_output(cae_editor *ed, cae_buf *out, const char *s, size_t n, const char *descr,
			size_t first_no, size_t total_lines, bool strip_cr);

/* ---- edit.c ---- */

/* The commands; each returns 0 (res set) or -ENOMEM. */
int cae__ed_do_create(cae_editor *ed, const char *path, size_t plen, const char *text, size_t len,
		      cae_editor_result *res);
int cae__ed_do_str_replace(cae_editor *ed, const char *path, size_t plen, const char *old,
			   size_t olen, const char *new, size_t nlen, cae_editor_result *res);
int cae__ed_do_insert(cae_editor *ed, const char *path, size_t plen, long long line,
		      const char *new, size_t nlen, cae_editor_result *res);
int cae__ed_do_undo(cae_editor *ed, const char *path, size_t plen, cae_editor_result *res);

#endif
