/* Reading a file as text and writing one atomically: what every command that takes a file
 * does with it once its path is resolved (path.c). Reads are checked (NUL bytes, UTF-8) while
 * the file is in the cache; writes go through the workspace's journal when it has one, else
 * through base/fs.h's one atomic writer. */
#include "editor-internal.h"

#include "base/buf.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/txn.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/banned.h"

void cae__ed_loaded_clear(ed_loaded *l)
{
	if (l->ed)
		cae__ed_spare_put(l->ed, l->raw);
	else
		free(l->raw);
	free(l->conv);
	if (l->fd >= 0)
		close(l->fd);
	memset(l, 0, sizeof(*l));
	l->fd = -1;
}

static void *closer(void *arg)
{
	close((int)(intptr_t)arg);
	return NULL;
}

/* Closes fd on a short-lived thread of its own. For the old version of a large file that an
 * edit has just replaced: its last reference goes with this close, and the kernel frees its
 * pages and blocks then (10 MB: ~1 ms on tmpfs, ~5-10 ms on ext4), which the rename would
 * otherwise do while the agent waits. Falls back to closing here. */
void cae__ed_close_later(int fd)
{
	pthread_attr_t attr;
	pthread_t th;
	if (pthread_attr_init(&attr) != 0) {
		close(fd);
		return;
	}
	(void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	(void)pthread_attr_setstacksize(&attr, 64 << 10);
	if (pthread_create(&th, &attr, closer, (void *)(intptr_t)fd) != 0)
		close(fd);
	pthread_attr_destroy(&attr);
}

static int too_large_error(cae_editor *ed, cae_editor_result *res, const char *display,
			   unsigned long long size)
{
	int r = cae__ed_res_error(
	    res,
	    "The file %s is too large for the text editor (%llu bytes; the limit is "
	    "%zu bytes). Use shell commands (e.g. `grep -n`, `sed -n '10,20p'`) to work "
	    "with it.",
	    display, size, ed->lim.max_file_bytes);
	return r < 0 ? r : 1;
}

static const char *file_type_name(mode_t m)
{
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISSOCK(m))
		return "a socket";
	if (S_ISCHR(m))
		return "a character device";
	if (S_ISBLK(m))
		return "a block device";
	return "not a regular file";
}

/* The refusals shared by the commands that take a file: a directory (only `view` lists
 * one) and anything but a regular file. Return 1 (error result set) or -ENOMEM. */
int cae__ed_refuse_directory(cae_editor_result *res, const ed_target *t)
{
	int r = cae__ed_res_error(
	    res,
	    "The path %s is a directory and only the `view` command can be used on "
	    "directories",
	    t->display);
	return r < 0 ? r : 1;
}

int cae__ed_refuse_special(cae_editor_result *res, const ed_target *t)
{
	int r = cae__ed_res_error(
	    res,
	    "The path %s is %s; the text editor only views and edits regular files "
	    "and directories.",
	    t->display, file_type_name(t->st.st_mode));
	return r < 0 ? r : 1;
}

/* Pieces in which a file is read and checked while it is in the cache. */
#define READ_PIECE ((size_t)256 << 10)

/* Opens and reads the regular file t (which exists). Returns 0, 1 (error set) or -ENOMEM.
 * With want_lf, a CRLF file is also converted for editing. With search (may be NULL), the
 * raw bytes are searched as they are read (the result is only meaningful when the file turns
 * out valid and not CRLF). */
int cae__ed_load_file(cae_editor *ed, const ed_target *t, bool want_lf, ed_search *search,
		      ed_loaded *l, cae_editor_result *res)
{
	int r;
	memset(l, 0, sizeof(*l));
	l->ed = ed;
	l->fd = -1;
	if (!S_ISREG(t->st.st_mode))
		return cae__ed_refuse_special(res, t);
	if ((unsigned long long)t->st.st_size > ed->lim.max_file_bytes)
		return too_large_error(ed, res, t->display, (unsigned long long)t->st.st_size);
	_cleanup_close_ int fd =
	    openat(t->dfd, t->base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0 && errno == ELOOP) {
		r = cae__ed_res_error(
		    res, "The file %s changed while it was being opened; try again.", t->display);
		return r < 0 ? r : 1;
	}
	if (fd < 0)
		return cae__ed_resolve_error(ed, res, t->display, -errno);
	if (fstat(fd, &l->st) < 0)
		return cae__ed_resolve_error(ed, res, t->display, -errno);
	if (!S_ISREG(l->st.st_mode) || l->st.st_ino != t->st.st_ino ||
	    l->st.st_dev != t->st.st_dev) {
		r = cae__ed_res_error(
		    res, "The file %s changed while it was being opened; try again.", t->display);
		return r < 0 ? r : 1;
	}
	size_t cap = (size_t)l->st.st_size;
	if (cap > ed->lim.max_file_bytes)
		return too_large_error(ed, res, t->display, (unsigned long long)cap);
	char *buf = cae__ed_buf_get(ed, cap + 1);
	if (!buf)
		return -ENOMEM;
	ed_scan scan;
	cae__ed_scan_init(&scan);
	size_t n = 0;
	for (;;) {
		char *dst = buf + n;
		size_t want = cap - n < READ_PIECE ? cap - n : READ_PIECE;
		char probe[4096];
		if (n == cap) {
			/* All that fstat announced is read: a short read into probe tells whether
			 * the file grew since (it is then read on, within the limit). */
			dst = probe;
			want = cap < ed->lim.max_file_bytes ? sizeof(probe) : 1;
		}
		ssize_t got = read(fd, dst, want);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			int e = errno;
			free(buf);
			if (n == cap && cap >= ed->lim.max_file_bytes)
				return cae__ed_resolve_error(ed, res, t->display, -e);
			r = cae__ed_res_error(res, "Ran into %s while trying to read %s",
					      strerror(e), t->display);
			return r < 0 ? r : 1;
		}
		if (got == 0)
			break;
		if (dst == probe) {
			if (cap >= ed->lim.max_file_bytes) {
				free(buf);
				return too_large_error(ed, res, t->display,
						       (unsigned long long)cap + 1);
			}
			size_t ncap = cap < 4096 ? 4096 : cap * 2;
			if (ncap < n + (size_t)got)
				ncap = n + (size_t)got;
			if (ncap > ed->lim.max_file_bytes)
				ncap = ed->lim.max_file_bytes;
			if (n + (size_t)got > ncap) {
				free(buf);
				return too_large_error(ed, res, t->display,
						       (unsigned long long)ncap + 1);
			}
			char *nb = realloc(buf, ncap + 1);
			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
			cap = ncap;
			memcpy(buf + n, probe, (size_t)got);
		}
		n += (size_t)got;
		cae__ed_scan_feed(&scan, buf, n, false);
		/* (A long old_str is searched less often: the last m - 1 bytes are searched
		 * again each time.) */
		if (search && scan.info.nul_at == SIZE_MAX && scan.info.bad_at == SIZE_MAX &&
		    n - search->next >= 4 * search->m)
			cae__ed_search_feed(search, buf, n);
	}
	if (search && scan.info.nul_at == SIZE_MAX && scan.info.bad_at == SIZE_MAX)
		cae__ed_search_feed(search, buf, n);
	buf[n] = '\0';
	l->raw = buf;
	l->raw_len = n;
	if (n >= ED_SPARE_MIN)
		l->fd = TAKE_FD(fd);

	cae__ed_scan_feed(&scan, buf, n, true);
	const ed_text_info info = scan.info;
	if (info.nul_at != SIZE_MAX) {
		cae__ed_loaded_clear(l);
		r = cae__ed_res_error(
		    res,
		    "The file %s looks like a binary file (it contains a NUL byte at "
		    "offset %zu); the text editor only views and edits text files. Use a "
		    "shell command (e.g. `file`, `xxd | head`) to inspect it.",
		    t->display, info.nul_at);
		return r < 0 ? r : 1;
	}
	if (info.bad_at != SIZE_MAX) {
		size_t line = cae__ed_count_newlines(buf, info.bad_at) + 1;
		cae__ed_loaded_clear(l);
		r = cae__ed_res_error(
		    res,
		    "The file %s is not valid UTF-8 text (the first invalid byte is on "
		    "line %zu, at offset %zu); the text editor only views and edits UTF-8 "
		    "text files. Use a shell command (e.g. `iconv`, `file`) to inspect or "
		    "convert it.",
		    t->display, line, info.bad_at);
		return r < 0 ? r : 1;
	}
	l->crlf = info.has_cr && cae__ed_is_crlf(buf, n);
	l->text = l->raw;
	l->len = n;
	if (l->crlf && want_lf) {
		l->conv = cae__ed_crlf_to_lf(buf, n, &l->len);
		if (!l->conv) {
			cae__ed_loaded_clear(l);
			return -ENOMEM;
		}
		l->text = l->conv;
	}
	return 0;
}

/* Bytes written per write call; the writeback of each such piece is started at once. */
#define WRITE_PIECE ((size_t)512 << 10)
#define WRITE_IOV 8

/* Writes the concatenation of segs to fd in pieces of WRITE_PIECE bytes (one writev each),
 * starting the writeback of every piece as soon as it is written (sync_file_range, a hint:
 * the fsync that follows still does the real work). The disk then writes the beginning of
 * a large file while the rest is copied, and the fsync has less left to wait for: 10 MB on
 * ext4 are durable ~4 ms sooner. Returns 0 or -errno. */
static int write_segs(int fd, const ed_seg *segs, size_t nsegs)
{
	size_t si = 0, so = 0; /* the next byte: segs[si].p[so] */
	off_t done = 0, started = 0;
	for (;;) {
		while (si < nsegs && so == segs[si].n) {
			si++;
			so = 0;
		}
		if (si == nsegs)
			return 0;
		struct iovec iov[WRITE_IOV];
		int k = 0;
		size_t room = WRITE_PIECE;
		for (size_t i = si, o = so; i < nsegs && k < WRITE_IOV && room > 0; i++, o = 0) {
			size_t take = segs[i].n - o < room ? segs[i].n - o : room;
			if (take == 0)
				continue;
			iov[k++] = (struct iovec){(void *)(uintptr_t)(segs[i].p + o), take};
			room -= take;
		}
		ssize_t w = writev(fd, iov, k);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		if (w == 0)
			return -EIO;
		done += w;
		for (size_t left = (size_t)w; left > 0;) {
			size_t take = segs[si].n - so < left ? segs[si].n - so : left;
			so += take;
			left -= take;
			if (so == segs[si].n) {
				si++;
				so = 0;
			}
		}
		if ((size_t)(done - started) >= WRITE_PIECE) {
			(void)sync_file_range(fd, started, done - started, SYNC_FILE_RANGE_WRITE);
			started = done;
		}
	}
}

/* Feeds segs to hs (NULL: nothing). */
static void hash_segs(ed_hash *hs, const ed_seg *segs, size_t nsegs)
{
	for (size_t i = 0; hs && i < nsegs; i++)
		cae__ed_hash_feed(hs, segs[i].p, segs[i].n);
}

typedef struct fill_ctx {
	const ed_seg *segs;
	size_t nsegs;
	bool crlf;		  /* every "\n" written as "\r\n" */
	const struct stat *owner; /* whose uid/gid to keep, or NULL */
	ed_hash *hs;		  /* gets the bytes written, or NULL */
} fill_ctx;

/* The new content into fd, then the owner (a cae_fill_fn). */
static int fill_file(void *ctx, int fd)
{
	const fill_ctx *fc = ctx;
	int r = 0;
	if (fc->crlf) {
		cae_buf b;
		size_t total = 0;
		for (size_t i = 0; i < fc->nsegs; i++)
			total += fc->segs[i].n;
		cae__buf_init(&b, SIZE_MAX - 1);
		r = cae__buf_reserve(&b, total + total / 8 + 16);
		for (size_t i = 0; r == 0 && i < fc->nsegs; i++)
			r = cae__ed_lf_to_crlf(&b, fc->segs[i].p, fc->segs[i].n);
		ed_seg all = {b.data, b.len};
		if (r == 0)
			r = write_segs(fd, &all, 1);
		if (r == 0)
			hash_segs(fc->hs, &all, 1);
		cae__buf_clear(&b);
	} else {
		r = write_segs(fd, fc->segs, fc->nsegs);
		if (r == 0)
			hash_segs(fc->hs, fc->segs, fc->nsegs);
	}
	const struct stat *o = fc->owner;
	if (r == 0 && o && (o->st_uid != geteuid() || o->st_gid != getegid())) {
		/* Keep the owner when we may (root, or a group of ours); a failure leaves ours. */
		(void)!fchown(fd, o->st_uid, o->st_gid);
	}
	return r;
}

int cae__ed_write_atomic(cae_editor *ed, const ed_target *t, const ed_seg *segs, size_t nsegs,
			 bool crlf, mode_t mode, const struct stat *owner, bool noreplace,
			 uint64_t *hash)
{
	ed_hash hs;
	cae__ed_hash_init(&hs);
	fill_ctx fc = {segs, nsegs, crlf, owner, hash ? &hs : NULL};
	int r;
	cae_txn *tx = TAKE_PTR(ed->create_txn);
	if (tx || (ed->wsj && cae__txn_begin(ed->wsj, &tx) == 0)) {
		/* A staged file left by a crash is removed by the next recovery. */
		int fd = cae__txn_stage(tx, t->dfd, t->dir ? t->dir : "", t->base,
					noreplace ? CAE_TXN_NOREPLACE : 0);
		if (fd < 0) {
			cae__txn_abort(tx);
			return fd;
		}
		r = fill_file(&fc, fd);
		if (r == 0 && fchmod(fd, mode & 07777) < 0)
			r = -errno;
		int d = cae__txn_stage_done(tx, fd);
		if (r == 0)
			r = d;
		if (r < 0) {
			cae__txn_abort(tx);
			return r;
		}
		r = cae__txn_commit(tx, NULL);
	} else {
		r = cae__write_atomic(t->dfd, t->base, mode, noreplace ? CAE_WRITE_NOREPLACE : 0,
				      fill_file, &fc);
	}
	if (r == 0 && hash)
		*hash = cae__ed_hash_final(&hs);
	return r;
}

int cae__ed_write_error(cae_editor_result *res, const char *display, int e)
{
	int r;
	if (e == -ENOMEM)
		return -ENOMEM;
	if (e == -EEXIST)
		r = cae__ed_res_error(
		    res,
		    "File already exists at: %s. Cannot overwrite files using command "
		    "`create`.",
		    display);
	else
		r = cae__ed_res_error(res, "Ran into %s while trying to write to %s", strerror(-e),
				      display);
	return r < 0 ? r : 1;
}
