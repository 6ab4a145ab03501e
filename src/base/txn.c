/* Crash-consistent file transactions over a workspace: see base/txn.h. */
#include "base/txn.h"

#include "base/buf.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/utf8.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

#define JOURNAL_MAGIC "cae-journal 1"
#define JOURNAL_SUFFIX ".journal"
#define JOURNAL_MAX_BYTES ((size_t)64 << 20)
#define KEY_FDS_MAX 256 /* directory fds kept per transaction; beyond, reopened by path */

/* ---------------------------------------------------------------------------------------- */
/* Kill points (tests) */

static atomic_long kill_at;
static atomic_long kill_count;
static atomic_long fail_at;
static atomic_long apply_count;

long cae__txn_test_fail_apply(long n)
{
	long passed = atomic_exchange(&apply_count, 0);
	atomic_store(&fail_at, n);
	return passed;
}

long cae__txn_test_kill_at(long n)
{
	long passed = atomic_exchange(&kill_count, 0);
	atomic_store(&kill_at, n);
	return passed;
}

static void kill_point(void)
{
	long n = atomic_fetch_add(&kill_count, 1) + 1;
	long at = atomic_load(&kill_at);
	if (at > 0 && n == at)
		raise(SIGKILL);
}

void cae__txn_kill_point(void)
{
	kill_point();
}

/* ---------------------------------------------------------------------------------------- */
/* The journal directory */

struct cae_wsj {
	int root_fd; /* borrowed, O_PATH | O_DIRECTORY */
	char *dir;   /* the journal directory (opened when used: an editor keeps one fd) */
	char *root;  /* the workspace's real path */
	char prefix[24];
	atomic_uint seq;
};

static int open_jdir(int at, const char *path)
{
	if (mkdirat(at, path, 0700) < 0 && errno != EEXIST)
		return -errno;
	int fd = openat(at, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* Only a directory of our own (a shared parent such as /tmp may hold someone else's). */
	struct stat st;
	if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 0022)) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

int cae__wsj_open(int root_fd, cae_wsj **out)
{
	_cleanup_free_ cae_wsj *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->root_fd = root_fd;
	w->root = cae__fd_path(w->root_fd);
	if (!w->root || w->root[0] != '/') {
		free(w->root);
		return -EIO;
	}
	uint64_t h = 1469598103934665603ULL;
	for (const char *p = w->root; *p; p++) {
		h ^= (unsigned char)*p;
		h *= 1099511628211ULL;
	}
	snprintf(w->prefix, sizeof(w->prefix), "%016llx.", (unsigned long long)h);
	/* Beside the workspace when we may write there, else inside it. */
	const char *slash = strrchr(w->root, '/');
	int dfd = -1;
	if (slash != w->root || w->root[1]) {
		_cleanup_free_ char *parent =
		    slash == w->root ? strdup("/") : strndup(w->root, (size_t)(slash - w->root));
		_cleanup_free_ char *path = parent ? cae__path_join(parent, CAE_JOURNAL_DIR) : NULL;
		if (!path) {
			cae__wsj_free(TAKE_PTR(w));
			return -ENOMEM;
		}
		dfd = open_jdir(AT_FDCWD, path);
		if (dfd >= 0)
			w->dir = TAKE_PTR(path);
	}
	if (dfd < 0) {
		dfd = open_jdir(w->root_fd, CAE_JOURNAL_DIR);
		w->dir = cae__path_join(w->root, CAE_JOURNAL_DIR);
		if (dfd < 0 || !w->dir) {
			int r = dfd < 0 ? dfd : -ENOMEM;
			if (dfd >= 0)
				close(dfd);
			cae__wsj_free(TAKE_PTR(w));
			return r;
		}
	}
	close(dfd);
	*out = TAKE_PTR(w);
	return 0;
}

/* Opens the journal directory (made again if someone removed it meanwhile). */
static int wsj_dirfd(const cae_wsj *w)
{
	int fd = open(w->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return open_jdir(AT_FDCWD, w->dir);
	return fd < 0 ? -errno : fd;
}

void cae__wsj_free(cae_wsj *w)
{
	if (!w)
		return;
	free(w->dir);
	free(w->root);
	free(w);
}

const char *cae__wsj_dir(const cae_wsj *w)
{
	return w->dir;
}

/* ---------------------------------------------------------------------------------------- */
/* Encoding */

static int put_field(cae_buf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	int r = cae__buf_append(b, " ", 1);
	if (!*s)
		return r < 0 ? r : cae__buf_append(b, ".", 1);
	for (const unsigned char *p = (const unsigned char *)s; r == 0 && *p; p++) {
		if (*p <= 0x20 || *p == '%' || *p >= 0x7f) {
			char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
			r = cae__buf_append(b, e, 3);
		} else {
			r = cae__buf_append(b, (const char *)p, 1);
		}
	}
	return r;
}

/* Decodes one field in place (s is NUL-terminated). Returns false when malformed. */
static bool decode_field(char *s)
{
	char *o = s;
	for (char *p = s; *p; p++) {
		if (*p != '%') {
			*o++ = *p;
			continue;
		}
		int a = cae__hex_digit((unsigned char)p[1]);
		int c = a >= 0 ? cae__hex_digit((unsigned char)p[2]) : -1;
		if (c < 0 || (a == 0 && c == 0))
			return false;
		*o++ = (char)(a * 16 + c);
		p += 2;
	}
	*o = '\0';
	return true;
}

/* ---------------------------------------------------------------------------------------- */
/* Transactions */

typedef struct key {
	char *dir;
	char *name;
	int dfd; /* O_PATH, or -1: reopen by dir */
	char *staged;
	bool remove;
	bool noreplace;
	char *backup;	/* made at commit */
	bool existed;	/* at commit */
	bool applied;	/* at commit */
	char **garbage; /* earlier staged versions, removed */
	size_t ngarbage;
} key;

struct cae_txn {
	cae_wsj *w;
	int jdir_fd; /* the journal directory, -1 until the first change */
	int jfd;     /* the journal, locked; -1 until the first change */
	char *jname;
	key *keys;
	size_t n, cap;
	char **dirs; /* made, in order */
	size_t ndirs;
	unsigned tmp_seq;
};

int cae__txn_begin(cae_wsj *w, cae_txn **out)
{
	cae_txn *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->w = w;
	t->jfd = -1;
	t->jdir_fd = -1;
	*out = t;
	return 0;
}

size_t cae__txn_count(const cae_txn *t)
{
	return t->n;
}

static int journal_append(cae_txn *t, const char *line, size_t len)
{
	kill_point();
	return cae__write_all(t->jfd, line, len);
}

/* Writes one journal line: tag and fields (NULL-terminated). */
static int journal_line(cae_txn *t, const char *tag, const char *f1, const char *f2, const char *f3)
{
	cae_buf b;
	cae__buf_init(&b, SIZE_MAX - 1);
	int r = cae__buf_puts(&b, tag);
	const char *fs[] = {f1, f2, f3};
	for (size_t i = 0; r == 0 && i < 3 && fs[i]; i++)
		r = put_field(&b, fs[i]);
	if (r == 0)
		r = cae__buf_append(&b, "\n", 1);
	if (r == 0)
		r = journal_append(t, b.data, b.len);
	cae__buf_clear(&b);
	return r;
}

static int journal_create(cae_txn *t)
{
	if (t->jfd >= 0)
		return 0;
	cae_wsj *w = t->w;
	if (t->jdir_fd < 0) {
		t->jdir_fd = wsj_dirfd(w);
		if (t->jdir_fd < 0)
			return t->jdir_fd;
	}
	char name[96];
	int fd = -1;
	for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
		snprintf(name, sizeof(name), "%s%d.%u.%u%s", w->prefix, (int)getpid(),
			 atomic_fetch_add(&w->seq, 1), (unsigned)random(), JOURNAL_SUFFIX);
		kill_point();
		fd = openat(t->jdir_fd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			    0600);
		if (fd < 0 && errno != EEXIST)
			return -errno;
	}
	if (fd < 0)
		return -EEXIST;
	/* Held until the journal is removed: recovery skips a locked journal. */
	if (flock(fd, LOCK_EX) < 0) {
		int e = -errno;
		unlinkat(t->jdir_fd, name, 0);
		close(fd);
		return e;
	}
	t->jfd = fd;
	t->jname = strdup(name);
	if (!t->jname)
		return -ENOMEM;
	return journal_line(t, JOURNAL_MAGIC, w->root, NULL, NULL);
}

/* Removes the journal (still locked) and closes it. */
static void journal_finish(cae_txn *t)
{
	if (t->jfd < 0)
		return;
	kill_point();
	unlinkat(t->jdir_fd, t->jname, 0);
	close(t->jfd);
	t->jfd = -1;
}

static void txn_free(cae_txn *t)
{
	if (t->jfd >= 0)
		close(t->jfd); /* the journal stays: recovery finishes it */
	if (t->jdir_fd >= 0)
		close(t->jdir_fd);
	for (size_t i = 0; i < t->n; i++) {
		key *k = &t->keys[i];
		free(k->dir);
		free(k->name);
		free(k->staged);
		free(k->backup);
		for (size_t g = 0; g < k->ngarbage; g++)
			free(k->garbage[g]);
		free(k->garbage);
		if (k->dfd >= 0)
			close(k->dfd);
	}
	free(t->keys);
	for (size_t i = 0; i < t->ndirs; i++)
		free(t->dirs[i]);
	free(t->dirs);
	free(t->jname);
	free(t);
}

static int key_dfd(cae_txn *t, key *k)
{
	if (k->dfd >= 0) {
		int d = fcntl(k->dfd, F_DUPFD_CLOEXEC, 3);
		return d < 0 ? -errno : d;
	}
	return cae__open_beneath(t->w->root_fd, *k->dir ? k->dir : ".", O_PATH | O_DIRECTORY, 0);
}

static key *find_key(cae_txn *t, const char *dir, const char *name, int dfd, int *r)
{
	*r = 0;
	for (size_t i = 0; i < t->n; i++)
		if (strcmp(t->keys[i].dir, dir) == 0 && strcmp(t->keys[i].name, name) == 0)
			return &t->keys[i];
	if (t->n == t->cap) {
		size_t nc = t->cap ? t->cap * 2 : 4;
		key *nk = realloc(t->keys, nc * sizeof(*nk));
		if (!nk) {
			*r = -ENOMEM;
			return NULL;
		}
		t->keys = nk;
		t->cap = nc;
	}
	key *k = &t->keys[t->n];
	memset(k, 0, sizeof(*k));
	k->dfd = -1;
	k->dir = strdup(dir);
	k->name = strdup(name);
	if (!k->dir || !k->name) {
		free(k->dir);
		free(k->name);
		*r = -ENOMEM;
		return NULL;
	}
	if (t->n < KEY_FDS_MAX)
		k->dfd = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
	t->n++;
	return k;
}

/* The previous staged version of k becomes garbage: removed now (and by recovery). */
static int drop_staged(cae_txn *t, key *k)
{
	if (!k->staged)
		return 0;
	char **ng = realloc(k->garbage, (k->ngarbage + 1) * sizeof(char *));
	if (!ng)
		return -ENOMEM;
	k->garbage = ng;
	k->garbage[k->ngarbage++] = k->staged;
	_cleanup_close_ int dfd = key_dfd(t, k);
	if (dfd >= 0) {
		kill_point();
		unlinkat(dfd, k->staged, 0);
	}
	k->staged = NULL;
	return 0;
}

static bool valid_name(const char *name)
{
	return *name && !strchr(name, '/') && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

int cae__txn_mkdir(cae_txn *t, const char *dir)
{
	if (!*dir)
		return -EEXIST;
	const char *slash = strrchr(dir, '/');
	const char *name = slash ? slash + 1 : dir;
	if (!valid_name(name))
		return -EINVAL;
	_cleanup_free_ char *parent = slash ? strndup(dir, (size_t)(slash - dir)) : strdup(".");
	if (!parent)
		return -ENOMEM;
	_cleanup_close_ int pfd = cae__open_beneath(t->w->root_fd, parent, O_PATH | O_DIRECTORY, 0);
	if (pfd < 0)
		return pfd;
	struct stat st;
	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
		return -EEXIST;
	int r = journal_create(t);
	if (r == 0)
		r = journal_line(t, "D", dir, NULL, NULL);
	if (r < 0)
		return r;
	char **nd = realloc(t->dirs, (t->ndirs + 1) * sizeof(char *));
	if (!nd)
		return -ENOMEM;
	t->dirs = nd;
	t->dirs[t->ndirs] = strdup(dir);
	if (!t->dirs[t->ndirs])
		return -ENOMEM;
	t->ndirs++;
	kill_point();
	if (mkdirat(pfd, name, 0755) < 0)
		return -errno;
	cae__keep_owner_dir(pfd, name);
	return 0;
}

int cae__txn_mkdir_hook(void *ctx, int dfd, const char *name, const char *path)
{
	(void)dfd;
	(void)name;
	return cae__txn_mkdir(ctx, path);
}

/* The key of dir/name about to be changed (its earlier staged version dropped), with the
 * journal made; NULL with *r set on failure. */
static key *change_key(cae_txn *t, int dfd, const char *dir, const char *name, int *r)
{
	if (!valid_name(name)) {
		*r = -EINVAL;
		return NULL;
	}
	if ((*r = journal_create(t)) < 0)
		return NULL;
	key *k = find_key(t, dir, name, dfd, r);
	if (k && (*r = drop_staged(t, k)) < 0)
		return NULL;
	return k;
}

int cae__txn_stage(cae_txn *t, int dfd, const char *dir, const char *name, unsigned flags)
{
	int r;
	key *k = change_key(t, dfd, dir, name, &r);
	if (!k)
		return r;
	k->remove = false;
	k->noreplace = (flags & CAE_TXN_NOREPLACE) != 0;
	char tmp[96];
	for (int attempt = 0; attempt < 100; attempt++) {
		snprintf(tmp, sizeof(tmp), ".cae-tmp-%d-%u-%u", (int)getpid(), ++t->tmp_seq,
			 (unsigned)random());
		if ((r = journal_line(t, "S", dir, name, tmp)) < 0)
			return r;
		kill_point();
		int fd =
		    openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0) {
			/* the owner of what it replaces, or of its directory (when we are root) */
			cae__keep_owner(fd, dfd, name);
			k->staged = strdup(tmp);
			if (!k->staged) {
				unlinkat(dfd, tmp, 0);
				close(fd);
				return -ENOMEM;
			}
			return fd;
		}
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

int cae__txn_stage_done(cae_txn *t, int fd)
{
	(void)t;
	kill_point();
	int r = fsync(fd) < 0 ? -errno : 0;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	return r;
}

int cae__txn_remove(cae_txn *t, int dfd, const char *dir, const char *name)
{
	int r;
	key *k = change_key(t, dfd, dir, name, &r);
	if (!k)
		return r;
	k->remove = true;
	return journal_line(t, "X", dir, name, NULL);
}

static void remove_garbage(cae_txn *t)
{
	for (size_t i = 0; i < t->n; i++) {
		key *k = &t->keys[i];
		if (!k->staged && !k->backup)
			continue;
		_cleanup_close_ int dfd = key_dfd(t, k);
		if (dfd < 0)
			continue;
		if (k->staged) {
			kill_point();
			unlinkat(dfd, k->staged, 0);
		}
		if (k->backup) {
			kill_point();
			unlinkat(dfd, k->backup, 0);
		}
	}
}

/* rmdir of dir (relative to the workspace), its parent opened beneath the workspace. */
static void rmdir_beneath(int root_fd, const char *dir)
{
	const char *slash = strrchr(dir, '/');
	_cleanup_free_ char *parent = slash ? strndup(dir, (size_t)(slash - dir)) : strdup(".");
	if (!parent)
		return;
	_cleanup_close_ int pfd = cae__open_beneath(root_fd, parent, O_PATH | O_DIRECTORY, 0);
	if (pfd < 0 || !valid_name(slash ? slash + 1 : dir))
		return;
	kill_point();
	unlinkat(pfd, slash ? slash + 1 : dir, AT_REMOVEDIR);
}

static void remove_dirs(cae_txn *t)
{
	for (size_t i = t->ndirs; i-- > 0;)
		rmdir_beneath(t->w->root_fd, t->dirs[i]);
}

void cae__txn_abort(cae_txn *t)
{
	if (!t)
		return;
	remove_garbage(t);
	remove_dirs(t);
	journal_finish(t);
	txn_free(t);
}

static int sync_fd(int fd)
{
	kill_point();
	return fsync(fd) < 0 ? -errno : 0;
}

static int apply_key(cae_txn *t, key *k, int dfd, bool backup)
{
	struct stat st;
	k->existed = fstatat(dfd, k->name, &st, AT_SYMLINK_NOFOLLOW) == 0;
	if (k->existed && k->noreplace)
		return -EEXIST;
	int r;
	if (backup && k->existed) {
		char tmp[96];
		snprintf(tmp, sizeof(tmp), ".cae-bak-%d-%u-%u", (int)getpid(), ++t->tmp_seq,
			 (unsigned)random());
		if ((r = journal_line(t, "B", k->dir, k->name, tmp)) < 0)
			return r;
		kill_point();
		if (linkat(dfd, k->name, dfd, tmp, 0) < 0)
			return -errno;
		k->backup = strdup(tmp);
		if (!k->backup)
			return -ENOMEM;
	} else if (backup) {
		if ((r = journal_line(t, "N", k->dir, k->name, NULL)) < 0)
			return r;
	}
	long at = atomic_load(&fail_at);
	if (at > 0 && atomic_fetch_add(&apply_count, 1) + 1 == at)
		return -EIO;
	kill_point();
	if (k->remove) {
		if (unlinkat(dfd, k->name, 0) < 0 && errno != ENOENT)
			return -errno;
	} else if (k->noreplace) {
		if ((r = cae__rename_noreplace(dfd, k->staged, k->name)) < 0)
			return r;
	} else if (renameat(dfd, k->staged, dfd, k->name) < 0) {
		return -errno;
	}
	free(k->staged);
	k->staged = NULL;
	k->applied = true;
	return 0;
}

/* Puts back the applied keys, last first. */
static int undo_applied(cae_txn *t)
{
	int bad = 0;
	for (size_t i = t->n; i-- > 0;) {
		key *k = &t->keys[i];
		if (!k->applied)
			continue;
		_cleanup_close_ int dfd = key_dfd(t, k);
		if (dfd < 0) {
			bad = dfd;
			continue;
		}
		kill_point();
		if (k->backup) {
			if (renameat(dfd, k->backup, dfd, k->name) < 0) {
				bad = -errno;
			} else {
				free(k->backup);
				k->backup = NULL;
			}
		} else if (!k->existed) {
			if (unlinkat(dfd, k->name, 0) < 0 && errno != ENOENT)
				bad = -errno;
		}
	}
	return bad;
}

int cae__txn_commit(cae_txn *t, size_t *failed)
{
	if (failed)
		*failed = SIZE_MAX;
	int r = 0;
	bool multi = t->n > 1;
	if (multi) {
		/* Everything staged is durable before the commit record. */
		for (size_t i = 0; r == 0 && i < t->n; i++) {
			_cleanup_close_ int dfd = key_dfd(t, &t->keys[i]);
			_cleanup_close_ int sfd =
			    dfd < 0 ? -1 : openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			r = dfd < 0 ? dfd : sfd < 0 ? -errno : sync_fd(sfd);
		}
		if (r == 0)
			r = journal_append(t, "C\n", 2);
		if (r == 0)
			r = sync_fd(t->jfd);
		if (r == 0)
			r = sync_fd(t->jdir_fd);
		if (r < 0) {
			cae__txn_abort(t);
			return r;
		}
	}
	for (size_t i = 0; i < t->n; i++) {
		key *k = &t->keys[i];
		_cleanup_close_ int dfd = key_dfd(t, k);
		r = dfd < 0 ? dfd : apply_key(t, k, dfd, multi && i + 1 < t->n);
		if (r < 0) {
			if (failed)
				*failed = i;
			break;
		}
	}
	if (r < 0) {
		if (multi) {
			int a = journal_append(t, "A\n", 2);
			if (a == 0)
				a = sync_fd(t->jfd);
			if (a < 0 || undo_applied(t) < 0) {
				/* keep the journal: recovery puts the rest back */
				txn_free(t);
				return r;
			}
		}
		cae__txn_abort(t);
		return r;
	}
	for (size_t i = 0; i < t->n; i++) {
		_cleanup_close_ int dfd = key_dfd(t, &t->keys[i]);
		_cleanup_close_ int sfd =
		    dfd < 0 ? -1 : openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (sfd >= 0)
			(void)sync_fd(sfd);
		if (!multi)
			break;
	}
	remove_garbage(t);
	journal_finish(t);
	txn_free(t);
	return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Recovery */

typedef struct rkey {
	char *dir, *name;
	char *staged; /* the final staged version, or NULL */
	bool remove;
	char *backup;
	bool existed_known, existed;
} rkey;

typedef struct rjournal {
	rkey *keys;
	size_t n;
	char **garbage; /* "dir\0name" pairs: staged versions superseded, all backups */
	char **garbage_dir;
	size_t ng;
	char **dirs;
	size_t ndirs;
	bool committed, aborting;
} rjournal;

static void rjournal_clear(rjournal *j)
{
	free(j->keys);
	free(j->garbage);
	free(j->garbage_dir);
	free(j->dirs);
	memset(j, 0, sizeof(*j));
}

static rkey *rfind(rjournal *j, char *dir, char *name)
{
	for (size_t i = 0; i < j->n; i++)
		if (strcmp(j->keys[i].dir, dir) == 0 && strcmp(j->keys[i].name, name) == 0)
			return &j->keys[i];
	rkey *nk = realloc(j->keys, (j->n + 1) * sizeof(*nk));
	if (!nk)
		return NULL;
	j->keys = nk;
	rkey *k = &j->keys[j->n++];
	memset(k, 0, sizeof(*k));
	k->dir = dir;
	k->name = name;
	return k;
}

static int add_garbage(rjournal *j, char *dir, char *name)
{
	char **g = realloc(j->garbage, (j->ng + 1) * sizeof(char *));
	if (!g)
		return -ENOMEM;
	j->garbage = g;
	char **gd = realloc(j->garbage_dir, (j->ng + 1) * sizeof(char *));
	if (!gd)
		return -ENOMEM;
	j->garbage_dir = gd;
	j->garbage[j->ng] = name;
	j->garbage_dir[j->ng] = dir;
	j->ng++;
	return 0;
}

static bool is_dir_field(const char *d)
{
	/* relative, no ".." component */
	if (d[0] == '/')
		return false;
	for (const char *p = d; (p = strstr(p, "..")); p += 2)
		if ((p == d || p[-1] == '/') && (p[2] == '/' || p[2] == '\0'))
			return false;
	return true;
}

/* Parses text (modified in place; the journal borrows from it). */
static int parse_journal(char *text, size_t len, rjournal *j)
{
	char *line = text, *end = text + len;
	bool first = true;
	while (line < end) {
		char *nl = memchr(line, '\n', (size_t)(end - line));
		if (!nl)
			break; /* a line cut by the crash: its action was not done */
		*nl = '\0';
		char *f[5] = {0};
		int nf = 0;
		for (char *s = line; nf < 5;) {
			char *sp = strchr(s, ' ');
			f[nf++] = s;
			if (!sp)
				break;
			*sp = '\0';
			s = sp + 1;
		}
		line = nl + 1;
		if (first) {
			first = false;
			if (nf < 2 || strcmp(f[0], "cae-journal") != 0 || strcmp(f[1], "1") != 0)
				return -EINVAL;
			continue;
		}
		for (int i = 1; i < nf; i++)
			if (!decode_field(f[i]))
				return -EINVAL;
		const char *tag = f[0];
		if (strcmp(tag, "C") == 0) {
			j->committed = true;
		} else if (strcmp(tag, "A") == 0) {
			j->aborting = true;
		} else if (strcmp(tag, "D") == 0 && nf == 2 && is_dir_field(f[1])) {
			char **nd = realloc(j->dirs, (j->ndirs + 1) * sizeof(char *));
			if (!nd)
				return -ENOMEM;
			j->dirs = nd;
			j->dirs[j->ndirs++] = f[1];
		} else if ((strcmp(tag, "S") == 0 || strcmp(tag, "B") == 0) && nf == 4 &&
			   is_dir_field(f[1]) && valid_name(f[2]) && valid_name(f[3]) &&
			   strncmp(f[3], ".cae-", 5) == 0) {
			rkey *k = rfind(j, f[1], f[2]);
			if (!k)
				return -ENOMEM;
			if (tag[0] == 'S') {
				if (k->staged && add_garbage(j, k->dir, k->staged) < 0)
					return -ENOMEM;
				k->staged = f[3];
				k->remove = false;
			} else {
				if (add_garbage(j, k->dir, f[3]) < 0)
					return -ENOMEM;
				if (!k->backup)
					k->backup = f[3];
				k->existed_known = true;
				k->existed = true;
			}
		} else if ((strcmp(tag, "X") == 0 || strcmp(tag, "N") == 0) && nf == 3 &&
			   is_dir_field(f[1]) && valid_name(f[2])) {
			rkey *k = rfind(j, f[1], f[2]);
			if (!k)
				return -ENOMEM;
			if (tag[0] == 'X') {
				if (k->staged && add_garbage(j, k->dir, k->staged) < 0)
					return -ENOMEM;
				k->staged = NULL;
				k->remove = true;
			} else {
				k->existed_known = true;
				k->existed = false;
			}
		} else {
			return -EINVAL;
		}
	}
	return first ? -ENODATA : 0;
}

/* Applies a parsed journal. Returns the number of steps that failed. */
static unsigned replay(cae_wsj *w, rjournal *j, unsigned *removed)
{
	unsigned bad = 0;
	bool forward = j->committed && !j->aborting;
	for (size_t i = 0; i < j->n; i++) {
		rkey *k = &j->keys[i];
		_cleanup_close_ int dfd =
		    cae__open_beneath(w->root_fd, k->dir, O_PATH | O_DIRECTORY, 0);
		if (dfd < 0) {
			if (dfd != -ENOENT)
				bad++;
			continue;
		}
		if (forward) {
			kill_point();
			if (k->staged && renameat(dfd, k->staged, dfd, k->name) < 0 &&
			    errno != ENOENT)
				bad++;
			if (k->remove && unlinkat(dfd, k->name, 0) < 0 && errno != ENOENT)
				bad++;
		} else {
			if (k->staged) {
				kill_point();
				if (unlinkat(dfd, k->staged, 0) == 0)
					(*removed)++;
			}
			if (j->aborting && k->backup) {
				kill_point();
				if (renameat(dfd, k->backup, dfd, k->name) < 0 && errno != ENOENT)
					bad++;
			} else if (j->aborting && k->existed_known && !k->existed) {
				kill_point();
				if (unlinkat(dfd, k->name, 0) < 0 && errno != ENOENT)
					bad++;
			}
		}
	}
	for (size_t i = 0; i < j->ng; i++) {
		_cleanup_close_ int dfd =
		    cae__open_beneath(w->root_fd, j->garbage_dir[i], O_PATH | O_DIRECTORY, 0);
		if (dfd < 0)
			continue;
		kill_point();
		if (unlinkat(dfd, j->garbage[i], 0) == 0)
			(*removed)++;
	}
	if (!forward)
		for (size_t i = j->ndirs; i-- > 0;)
			rmdir_beneath(w->root_fd, j->dirs[i]);
	return bad;
}

static int recover_one(cae_wsj *w, int jdir, const char *name, cae_wsj_stats *st)
{
	_cleanup_close_ int fd = openat(jdir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno == EWOULDBLOCK) {
			st->busy++;
			return 0;
		}
		return -errno;
	}
	/* The owner removes its journal before it lets go of the lock: a journal that is gone
	 * or replaced by now is finished. */
	struct stat a, b;
	if (fstat(fd, &a) < 0 || fstatat(jdir, name, &b, AT_SYMLINK_NOFOLLOW) < 0 ||
	    a.st_ino != b.st_ino || a.st_dev != b.st_dev || !S_ISREG(a.st_mode))
		return 0;
	char *text = NULL;
	size_t len = 0;
	int r = cae__read_fd(fd, JOURNAL_MAX_BYTES, &text, &len);
	if (r < 0)
		return r;
	rjournal j = {0};
	r = parse_journal(text, len, &j);
	st->journals++;
	unsigned bad = 0;
	if (r == 0 || r == -ENODATA) {
		if (r == 0) {
			bad = replay(w, &j, &st->removed);
			if (j.committed && !j.aborting)
				st->forward++;
			else
				st->back++;
		}
		r = 0;
	}
	rjournal_clear(&j);
	free(text);
	if (r < 0)
		return r; /* unreadable: kept for a person to look at */
	if (bad) {
		st->incomplete++;
		return 0;
	}
	kill_point();
	unlinkat(jdir, name, 0);
	return 0;
}

int cae__wsj_recover(cae_wsj *w, cae_wsj_stats *st)
{
	cae_wsj_stats local;
	if (!st)
		st = &local;
	memset(st, 0, sizeof(*st));
	_cleanup_close_ int jdir = wsj_dirfd(w);
	if (jdir < 0)
		return jdir;
	int dfd = fcntl(jdir, F_DUPFD_CLOEXEC, 3);
	if (dfd < 0)
		return -errno;
	DIR *d = fdopendir(dfd);
	if (!d) {
		int e = -errno;
		close(dfd);
		return e;
	}
	size_t pl = strlen(w->prefix), sl = strlen(JOURNAL_SUFFIX);
	char **names = NULL;
	size_t n = 0;
	int r = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (l <= pl + sl || strncmp(de->d_name, w->prefix, pl) != 0 ||
		    strcmp(de->d_name + l - sl, JOURNAL_SUFFIX) != 0)
			continue;
		char **nn = realloc(names, (n + 1) * sizeof(char *));
		if (!nn || !(nn[n] = strdup(de->d_name))) {
			names = nn ? nn : names;
			r = -ENOMEM;
			break;
		}
		names = nn;
		n++;
	}
	closedir(d);
	for (size_t i = 0; i < n; i++) {
		if (r == 0) {
			int k = recover_one(w, jdir, names[i], st);
			if (k < 0)
				st->incomplete++;
		}
		free(names[i]);
	}
	free(names);
	return r;
}

int cae__wsj_recover_path(const char *root_path, cae_wsj_stats *st)
{
	_cleanup_close_ int fd = open(root_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	cae_wsj *w = NULL;
	int r = cae__wsj_open(fd, &w);
	if (r < 0)
		return r;
	r = cae__wsj_recover(w, st);
	cae__wsj_free(w);
	return r;
}
