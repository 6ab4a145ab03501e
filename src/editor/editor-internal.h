/* Internals of the text editor (src/editor/): text scanning and numbering (text.c), path
 * normalisation (path.c), the bounded undo history (undo.c). Not installed. */
#ifndef CAE_EDITOR_INTERNAL_H
#define CAE_EDITOR_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

/* ---- text.c ---- */

typedef struct ed_text_info {
	size_t nul_at; /* offset of the first NUL byte, SIZE_MAX if none */
	size_t bad_at; /* offset of the first invalid UTF-8 sequence, SIZE_MAX if none */
	bool has_cr;   /* some "\r" (only meaningful when the text is valid) */
} ed_text_info;

/* One pass over s: NUL bytes, UTF-8 validity, presence of "\r". Word-at-a-time for ASCII. */
void ed_text_scan(const char *s, size_t n, ed_text_info *info);

/* The same check made piece by piece while a file is read, each piece while it is still in
 * the cache. */
typedef struct ed_scan {
	size_t pos; /* bytes checked so far */
	ed_text_info info;
} ed_scan;

void ed_scan_init(ed_scan *sc);
/* Checks the text s[0..avail) as far as it has not been checked yet: s is the text read so far
 * (each call with the same bytes, and more; the buffer may have moved). Without final, a
 * multi-byte sequence that may go on past avail is left for the next call. After a call with
 * final, sc->info is what ed_text_scan(s, avail) gives. */
void ed_scan_feed(ed_scan *sc, const char *s, size_t avail, bool final);

/* Offset of the first occurrence of needle (m bytes) in hay[from..n), the one memmem would
 * find, or SIZE_MAX. SSE2: candidates by first and last byte 64 positions at a time, memmem
 * when near-misses make that slow (never worse than linear time plus a bounded extra). */
size_t ed_find(const char *hay, size_t n, size_t from, const char *needle, size_t m);

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

void ed_search_init(ed_search *se, const char *needle, size_t m);
/* Searches the text s[0..avail) as far as not searched yet (same rules as ed_scan_feed). */
void ed_search_feed(ed_search *se, const char *s, size_t avail);
/* Number of "\n" bytes in s[0..n). */
size_t ed_count_newlines(const char *s, size_t n);
/* Number of lines in the editor's line model (a final "\n" ends the last line). */
size_t ed_count_lines(const char *s, size_t n);
/* Offset of the start of 0-based line `idx`; n when the text has fewer lines. */
size_t ed_line_offset(const char *s, size_t n, size_t idx);
/* Offset just after the `count`-th "\n" at or after `from`, or n if there are fewer. */
size_t ed_skip_lines(const char *s, size_t n, size_t from, size_t count);
/* Start of the line `back` lines before the line containing `off` (0: that line's start). */
size_t ed_back_lines(const char *s, size_t off, size_t back);
/* True if s has at least one "\n" and every "\n" follows a "\r". */
bool ed_is_crlf(const char *s, size_t n);
/* New copy with every "\r\n" turned into "\n". NULL on allocation failure. */
char *ed_crlf_to_lf(const char *s, size_t n, size_t *out_len);
/* Appends s to out with every "\n" written as "\r\n". */
int ed_lf_to_crlf(cae_buf *out, const char *s, size_t n);

typedef struct ed_numbered {
	size_t lines_shown; /* lines written (a cut line counts) */
	bool clipped;	    /* stopped before the end of s */
	bool line_cut;	    /* the last line written was cut */
} ed_numbered;

/* Appends s to out numbered like `cat -n` ("%6zu\t" + line + "\n"), the first line numbered
 * first_no. Stops at whole lines once the output would exceed max_chars characters (a single
 * line that alone exceeds it is cut at a character boundary). A trailing "\r" of each line is
 * left out when strip_cr. Returns 0 or -ENOMEM. */
int ed_number_lines(cae_buf *out, const char *s, size_t n, size_t first_no, size_t max_chars,
		    bool strip_cr, ed_numbered *res);

typedef struct ed_ws_match {
	size_t first_line; /* 1-based */
	size_t last_line;
} ed_ws_match;

/* Occurrences of needle in hay when whitespace (space, tab, CR, LF, VT, FF) is ignored on both
 * sides. Writes up to max_out matches to out and returns how many were found (stops counting
 * after a work budget; *gave_up then set). 0 when the needle is only whitespace. */
size_t ed_ws_find(const char *hay, size_t n, const char *needle, size_t m, ed_ws_match *out,
		  size_t max_out, bool *gave_up);

/* Characters (UTF-8 sequences) in valid UTF-8. */
size_t ed_count_chars(const char *s, size_t n);

/* ---- path.c ---- */

/* Normalises display_root (absolute) into a new string without trailing slashes ("/" stays).
 * NULL if it is not absolute or on allocation failure. */
char *ed_path_root_normalize(const char *display_root);

typedef enum ed_path_error {
	ED_PATH_OK = 0,
	ED_PATH_EMPTY,
	ED_PATH_TOO_LONG,
	ED_PATH_NUL,
	ED_PATH_NOT_UTF8,
	ED_PATH_OUTSIDE, /* absolute and not under the display root, or ".." above the workspace */
	ED_PATH_NOMEM,
} ed_path_error;

#define ED_PATH_MAX 4096

/* Turns the agent's path into a workspace-relative path (empty and "." components dropped,
 * ".." kept for openat2 to judge, "" for the workspace itself); also the display form's
 * tail. An absolute path must start with the display root's components. Confinement itself
 * is done by openat2 when the path is used; this only refuses what is plainly outside (an
 * absolute path elsewhere). *rel is new. */
ed_path_error ed_path_to_rel(const char *root, const char *path, size_t len, char **rel);
/* root + "/" + rel (root alone for ""). New string, NULL on allocation failure. */
char *ed_path_display(const char *root, const char *rel);
/* Joins a relative directory and a relative path ("" dir = path). New string. */
char *ed_path_join_rel(const char *dir, const char *path);

/* ---- undo.c ---- */

typedef struct ed_undo ed_undo;

ed_undo *ed_undo_new(unsigned depth, size_t budget);
void ed_undo_free(ed_undo *u);
/* Records the content a file had before an edit. data (may be NULL when !existed) is stolen
 * in every case. Returns 1 if kept, 0 if not (undo disabled, or larger than the budget),
 * -ENOMEM. */
/* written: ed_hash of what the edit wrote (what the file must still hold for an undo). */
int ed_undo_push(ed_undo *u, const char *key, char *data, size_t len, bool existed,
		 uint64_t written);
/* Takes the newest entry of key. Returns 1 with *data (owned), *len, *existed, *written; 0
 * when there is none. */
int ed_undo_pop(ed_undo *u, const char *key, char **data, size_t *len, bool *existed,
		uint64_t *written);

/* A 64-bit hash of a byte stream fed in pieces (the same for any split). Not cryptographic:
 * it tells whether a file still holds what the editor wrote. */
typedef struct ed_hash {
	uint64_t h;
	uint64_t total;
	unsigned char buf[8];
	size_t nbuf;
} ed_hash;

void ed_hash_init(ed_hash *hs);
void ed_hash_feed(ed_hash *hs, const void *data, size_t n);
uint64_t ed_hash_final(const ed_hash *hs);
size_t ed_undo_bytes(const ed_undo *u);
/* The data the history lets go of (entries dropped for the depth or the budget, data pushed
 * but not kept) goes to release(ctx, data), which then owns it, instead of free(). */
void ed_undo_set_release(ed_undo *u, void (*release)(void *ctx, char *data), void *ctx);

#endif
