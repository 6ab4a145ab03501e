/* The host-side cache of bare mirrors: a repeated task's clone reads local objects and only
 * what is new crosses the network. One mirror per remote URL under <state_dir>/mirrors/,
 * locked with flock (a lock dies with its holder), trusted only while it is complete and no
 * git died writing it; anything else is removed and made anew. The token reaches the host's
 * git through cae__git_run's credential helper only: never the mirror's config or files.
 *
 * Each use asks the remote for its refs (`git ls-remote`, with the task's credentials: a
 * task is never served what they could not fetch) and fetches only when they are not the
 * mirror's: an unchanged repository costs one round trip (git.mirror_current), a changed
 * one that and the fetch of what is new (git.mirror_fetch). */
#include "backend/backend-internal.h"

#include "base/fs.h"
#include "base/gitsafe.h"
#include "base/macro.h"
#include "cae/log.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/banned.h"

/* In each mirror, written last by a fetch that succeeded, removed before any fetch begins:
 * the normalised URL it mirrors. */
#define MARKER "cae-mirror"
#define URL_MAX 4096

#define UPLOAD_PACK "--upload-pack=git-upload-pack"

/* The URL as the key sees it: scheme and host in lower case, no trailing "/" or ".git". */
static char *normalise(const char *url)
{
	char *s = strdup(url);
	if (!s)
		return NULL;
	char *p = strstr(s, "://");
	char *host = p ? p + 3 : s;
	size_t hl = strcspn(host, "/");
	if (!p) /* user@host:path */
		hl = strcspn(host, ":/");
	for (char *c = s; c < host + hl; c++)
		*c = (char)tolower((unsigned char)*c);
	size_t n = strlen(s);
	for (;;) {
		if (n > (size_t)(host - s) + hl && s[n - 1] == '/')
			n--;
		else if (n >= (size_t)(host - s) + hl + 4 && strncmp(s + n - 4, ".git", 4) == 0)
			n -= 4;
		else
			break;
	}
	s[n] = '\0';
	return s;
}

/* 64-bit FNV-1a of s as 16 hex digits: the name of the mirror. A collision is not trusted
 * either: the marker must name the same URL. */
static void url_key(const char *norm, char out[17])
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (const unsigned char *c = (const unsigned char *)norm; *c; c++) {
		h ^= *c;
		h *= 0x100000001b3ULL;
	}
	snprintf(out, 17, "%016llx", (unsigned long long)h);
}

static char *mirrors_dir(const cae_config *cfg)
{
	return cae__path_join(cfg->command_executor.state_dir, "mirrors");
}

/* flock(fd, op) that a readable cancel_fd (-1: none) ends with -ECANCELED: tried without
 * blocking, then again every 20 ms (blocking in flock would not see the cancel). */
static int flock_cancellable(int fd, int op, int cancel_fd)
{
	for (;;) {
		if (flock(fd, op | LOCK_NB) == 0)
			return 0;
		if (errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		if ((op & LOCK_NB) && errno == EWOULDBLOCK)
			return -EWOULDBLOCK;
		struct pollfd p = {.fd = cancel_fd, .events = POLLIN};
		if (poll(&p, cancel_fd >= 0 ? 1 : 0, 20) > 0)
			return -ECANCELED;
	}
}

/* Opens and flocks path (created when missing) with op; a lock file that prune unlinked
 * while we waited is not the lock any more: open it again. *fd_out: the held fd. */
static int lock_path(const char *path, int op, int cancel_fd, int *fd_out)
{
	for (;;) {
		int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0)
			return -errno;
		int r = flock_cancellable(fd, op, cancel_fd);
		if (r < 0) {
			close(fd);
			return r;
		}
		struct stat a, b;
		if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
		    a.st_ino == b.st_ino) {
			*fd_out = fd;
			return 0;
		}
		close(fd);
	}
}

/* The name of a lock file of git's under dir/sub (recursively when deep), or NULL. New. */
static char *find_git_lock(const char *dir, const char *sub, bool deep)
{
	_cleanup_free_ char *path = sub ? cae__path_join(dir, sub) : strdup(dir);
	DIR *d = path ? opendir(path) : NULL;
	if (!d)
		return NULL;
	char *found = NULL;
	struct dirent *e;
	while (!found && (e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		size_t n = strlen(e->d_name);
		_cleanup_free_ char *rel = sub ? cae__path_join(sub, e->d_name) : strdup(e->d_name);
		if (!rel)
			break;
		if (n > 5 && strcmp(e->d_name + n - 5, ".lock") == 0) {
			found = TAKE_PTR(rel);
			break;
		}
		if (deep && e->d_type == DT_DIR)
			found = find_git_lock(dir, rel, true);
	}
	closedir(d);
	return found;
}

/* Why the mirror at dir cannot be trusted (NULL: it can; "absent": there is none), into
 * why (size bytes). */
static const char *distrust(const char *dir, const char *norm, char *why, size_t size)
{
	if (!cae__is_dir(dir))
		return "absent";
	_cleanup_free_ char *marker = cae__path_join(dir, MARKER);
	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	if (!marker || cae__read_file(AT_FDCWD, marker, URL_MAX, &text, &len) < 0)
		return "incomplete (no marker: a fetch did not finish)";
	if (len != strlen(norm) || memcmp(text, norm, len) != 0)
		return "it mirrors another URL";
	_cleanup_free_ char *head = cae__path_join(dir, "HEAD");
	struct stat st;
	if (!head || lstat(head, &st) < 0 || !S_ISREG(st.st_mode))
		return "no HEAD";
	/* under our exclusive lock no git of ours writes it: a lock file is a dead git's */
	static const struct {
		const char *sub;
		bool deep;
	} where[] = {{NULL, false},	      {"refs", true},	       {"objects", false},
		     {"objects/info", false}, {"objects/pack", false}, {"info", false}};
	for (size_t i = 0; i < ARRAY_SIZE(where); i++) {
		_cleanup_free_ char *lock = find_git_lock(dir, where[i].sub, where[i].deep);
		if (lock) {
			snprintf(why, size, "a lock file left by a git that died: %s", lock);
			return why;
		}
	}
	return NULL;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The lines of text (each "<oid> <ref>", a tab or a space between) that name a branch or a
 * tag (not peeled: "^{}"; not a symref's "ref: <target> <name>"), as "<ref> <oid>" lines
 * sorted by name, in one string; NULL when out of memory. */
static char *ref_lines(const char *text)
{
	text = text ? text : "";
	size_t max = 1;
	for (const char *c = text; *c; c++)
		max += *c == '\n';
	_cleanup_free_ char **v = calloc(max, sizeof(char *));
	char *out = NULL;
	size_t n = 0, len = 1;
	for (const char *l = text; v && *l;) {
		size_t k = strcspn(l, "\n");
		size_t o = strcspn(l, "\t ");
		bool oid = (o == 40 || o == 64) && strspn(l, "0123456789abcdef") == o;
		size_t rn = oid && o < k ? k - o - 1 : 0;
		const char *ref = rn ? l + o + 1 : l;
		bool wanted = rn && strcspn(ref, "\t ") >= rn &&
			      ((rn > 11 && strncmp(ref, "refs/heads/", 11) == 0) ||
			       (rn > 10 && strncmp(ref, "refs/tags/", 10) == 0)) &&
			      !(rn > 3 && strncmp(ref + rn - 3, "^{}", 3) == 0);
		if (wanted) {
			if (asprintf(&v[n], "%.*s %.*s\n", (int)rn, ref, (int)o, l) < 0)
				goto out;
			len += strlen(v[n++]);
		}
		l += k + (l[k] == '\n');
	}
	if (!v)
		return NULL;
	qsort(v, n, sizeof(char *), cmp_str);
	out = malloc(len);
	if (out) {
		out[0] = '\0';
		for (size_t i = 0, at = 0; i < n; i++) {
			size_t m = strlen(v[i]);
			memcpy(out + at, v[i], m + 1);
			at += m;
		}
	}
out:
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	return out;
}

/* True when the mirror at dir (gitdir: its --git-dir option) has exactly the remote's
 * branches and tags (ls: `git ls-remote` output of them, whole) and its HEAD (head: the
 * remote's default branch, "" when it said none): nothing to fetch. */
static bool mirror_current(const cae_git_ctx *g, const char *dir, const char *gitdir,
			   const char *ls, const char *head)
{
	if (head[0]) {
		_cleanup_free_ char *hp = cae__path_join(dir, "HEAD");
		_cleanup_free_ char *text = NULL;
		size_t len = 0;
		char want[600];
		snprintf(want, sizeof(want), "ref: %s\n", head);
		if (!hp || cae__read_file(AT_FDCWD, hp, sizeof(want), &text, &len) < 0 ||
		    len != strlen(want) || memcmp(text, want, len) != 0)
			return false;
	}
	const char *fe[] = {
	    CAE_GIT_ARGV, gitdir, "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads",
	    "refs/tags",  NULL};
	cae_run_result res;
	cae_error e = {0};
	if (cae__git_run(g, NULL, fe, &res, &e) < 0)
		return false;
	bool same = false;
	if (res.exit_code == 0 && !res.out_truncated) {
		_cleanup_free_ char *theirs = ref_lines(ls), *ours = ref_lines(res.out);
		same = theirs && ours && strcmp(theirs, ours) == 0;
	}
	cae_run_result_clear(&res);
	return same;
}

/* Makes the mirror (when absent) and fetches it from url (*fetched), unless the remote's
 * branches, tags and default branch are the mirror's already (one `git ls-remote` tells);
 * the marker is removed before a fetch and written again after it. */
static int update(const cae_git_ctx *g, const char *dir, const char *url, const char *norm,
		  bool *fetched, cae_error *err)
{
	_cleanup_free_ char *gitdir = NULL;
	_cleanup_free_ char *marker = cae__path_join(dir, MARKER);
	if (asprintf(&gitdir, "--git-dir=%s", dir) < 0 || !marker)
		return cae_error_set(err, -ENOMEM, "out of memory");
	bool fresh = !cae__is_dir(dir);
	if (fresh) {
		const char *init[] = {CAE_GIT_ARGV, "init", "--quiet", "--bare", "--", dir, NULL};
		int r = cae__git_step(g, NULL, init, "git init of the mirror", err);
		if (r < 0)
			return r;
	}
	/* the remote's default branch (HEAD's symref), branches and tags */
	const char *ls[] = {CAE_GIT_ARGV, gitdir, "ls-remote",	  UPLOAD_PACK,	 "--symref", "--",
			    url,	  "HEAD", "refs/heads/*", "refs/tags/*", NULL};
	cae_run_result res;
	int r = cae__git_run(g, NULL, ls, &res, err);
	if (r < 0)
		return cae_error_prefix(err, "git ls-remote");
	char head[512] = "";
	const char *p = res.exit_code == 0 && res.out ? strstr(res.out, "ref: refs/heads/") : NULL;
	if (p) {
		p += 5;
		size_t n = strcspn(p, "\t\n");
		if (n < sizeof(head) && p[n] == '\t') {
			memcpy(head, p, n);
			head[n] = '\0';
		}
	}
	/* (a failed ls-remote: the fetch that follows says why, in git's words) */
	bool current = !fresh && res.exit_code == 0 && !res.out_truncated &&
		       mirror_current(g, dir, gitdir, res.out, head);
	cae_run_result_clear(&res);
	if (current)
		return 0;
	if (!fresh && unlink(marker) < 0 && errno != ENOENT)
		return cae_error_set(err, -errno, "mirror %s: %s", dir, strerror(errno));
	if (head[0]) {
		const char *sym[] = {CAE_GIT_ARGV, gitdir, "symbolic-ref", "HEAD", head, NULL};
		if ((r = cae__git_step(g, NULL, sym, "git symbolic-ref", err)) < 0)
			return r;
	}
	const char *fetch[] = {CAE_GIT_ARGV,
			       gitdir,
			       "fetch",
			       "--quiet",
			       "--prune",
			       "--no-tags",
			       UPLOAD_PACK,
			       "--",
			       url,
			       "+refs/heads/*:refs/heads/*",
			       "+refs/tags/*:refs/tags/*",
			       NULL};
	r = cae__git_step(g, NULL, fetch, "git fetch into the mirror", err);
	if (r < 0)
		return r;
	*fetched = true;
	r = cae__write_file_atomic(AT_FDCWD, marker, norm, strlen(norm), 0600, false);
	return r < 0 ? cae_error_set(err, r, "mirror %s: %s", dir, strerror(-r)) : 0;
}

void cae__mirror_close(cae_mirror *m)
{
	if (m->fd >= 0)
		close(m->fd); /* the lock goes with it */
	m->fd = -1;
	free(m->dir);
	free(m->lock);
	m->dir = m->lock = NULL;
}

int cae__mirror_open(const cae_config *cfg, cae_log *log, const char *url, const cae_git_ctx *g,
		     bool rebuild, int cancel_fd, cae_mirror *m, cae_error *err)
{
	*m = (cae_mirror){.fd = -1};
	_cleanup_free_ char *norm = normalise(url);
	_cleanup_free_ char *root = mirrors_dir(cfg);
	if (!norm || !root)
		return cae_error_set(err, -ENOMEM, "out of memory");
	char key[17];
	url_key(norm, key);
	char name[32];
	snprintf(name, sizeof(name), "%s.git", key);
	m->dir = cae__path_join(root, name);
	snprintf(name, sizeof(name), "%s.lock", key);
	m->lock = cae__path_join(root, name);
	int r = !m->dir || !m->lock ? -ENOMEM : cae__mkdir_p(root, 0700);
	if (r == 0)
		r = lock_path(m->lock, LOCK_EX, cancel_fd, &m->fd);
	if (r < 0) {
		cae__mirror_close(m);
		return r == -ECANCELED
			   ? cae_error_set(err, r, "cancelled")
			   : cae_error_set(err, r, "mirror cache %s: %s", root, strerror(-r));
	}
	_cleanup_free_ char *red = cae_redact_url(url);
	char buf[CAE_ERROR_MSG_MAX + 32];
	const char *why = rebuild ? "asked" : distrust(m->dir, norm, buf, sizeof(buf));
	cae_error e = {0};
	for (;;) {
		if (why && strcmp(why, "absent") != 0) {
			/* (asked: the caller logged why) */
			if (!rebuild)
				cae_log_fields(log, CAE_LOG_WARN, "git.mirror_rebuild",
					       json_pack("{s:s, s:s, s:s}", "url", red ? red : "",
							 "key", key, "reason", why),
					       NULL);
			r = cae__rm_rf(m->dir);
			if (r < 0 && r != -ENOENT) {
				r = cae_error_set(&e, r, "cannot remove mirror %s: %s", m->dir,
						  strerror(-r));
				break;
			}
		}
		bool fetched = false;
		r = update(g, m->dir, url, norm, &fetched, &e);
		if (r == 0)
			cae_log_fields(log, CAE_LOG_INFO,
				       fetched ? "git.mirror_fetch" : "git.mirror_current",
				       json_pack("{s:s, s:s, s:b}", "url", red ? red : "", "key",
						 key, "new", why != NULL),
				       NULL);
		/* a fresh mirror that failed: the remote's doing; an old one: made anew once */
		if (r == 0 || why || r == -ECANCELED)
			break;
		snprintf(buf, sizeof(buf), "the fetch failed: %s", e.message);
		why = buf;
		rebuild = false;
	}
	if (r < 0 && err)
		*err = e;
	if (r < 0) {
		cae__mirror_close(m);
		return r;
	}
	/* the lock file's mtime says when the mirror was last used (prune reads it) */
	(void)futimens(m->fd, NULL);
	/* readers share it; a rebuild or prune waits for them */
	r = flock_cancellable(m->fd, LOCK_SH, cancel_fd);
	if (r < 0) {
		cae__mirror_close(m);
		return cae_error_set(err, r, "mirror lock: %s", strerror(-r));
	}
	return 0;
}

/* Removes the mirror of lock file name (in root) when unused for longer than max_age_s (or
 * all) and nobody holds it. Returns 1 when removed. */
static int prune_one(const char *root, const char *key, int64_t max_age_s, bool all,
		     json_t *removed, cae_error *err)
{
	char name[300];
	snprintf(name, sizeof(name), "%s.lock", key);
	_cleanup_free_ char *lock = cae__path_join(root, name);
	snprintf(name, sizeof(name), "%s.git", key);
	_cleanup_free_ char *dir = cae__path_join(root, name);
	if (!lock || !dir)
		return cae_error_set(err, -ENOMEM, "out of memory");
	int fd = -1;
	int r = lock_path(lock, LOCK_EX | LOCK_NB, -1, &fd);
	if (r == -EWOULDBLOCK)
		return 0; /* in use */
	if (r < 0)
		return cae_error_set(err, r, "mirror %s: %s", lock, strerror(-r));
	struct stat st;
	bool old = fstat(fd, &st) == 0 && (int64_t)time(NULL) - (int64_t)st.st_mtime > max_age_s;
	if (!all && !old) {
		close(fd);
		return 0;
	}
	_cleanup_free_ char *marker = cae__path_join(dir, MARKER);
	_cleanup_free_ char *url = NULL;
	size_t len;
	if (!marker || cae__read_file(AT_FDCWD, marker, URL_MAX, &url, &len) < 0)
		url = NULL;
	r = cae__rm_rf(dir);
	if (r < 0 && r != -ENOENT) {
		close(fd);
		return cae_error_set(err, r, "cannot remove mirror %s: %s", dir, strerror(-r));
	}
	/* while held: whoever opened it meanwhile sees it unlinked and opens a new one */
	(void)unlink(lock);
	close(fd);
	if (removed) {
		_cleanup_free_ char *red = url ? cae_redact_url(url) : NULL;
		json_array_append_new(removed, json_pack("{s:s, s:s?}", "key", key, "url", red));
	}
	return 1;
}

int cae__mirror_prune(const cae_config *cfg, int64_t max_age_s, bool all, json_t *removed,
		      int *count, cae_error *err)
{
	*count = 0;
	_cleanup_free_ char *root = mirrors_dir(cfg);
	if (!root)
		return cae_error_set(err, -ENOMEM, "out of memory");
	DIR *d = opendir(root);
	if (!d)
		return errno == ENOENT
			   ? 0
			   : cae_error_set(err, -errno, "%s: %s", root, strerror(errno));
	/* the keys first: prune unlinks entries of this directory as it goes */
	json_t *keys = json_array();
	struct dirent *e;
	while (keys && (e = readdir(d))) {
		size_t n = strlen(e->d_name);
		const char *dot = strrchr(e->d_name, '.');
		if (!dot || dot == e->d_name || n > 250)
			continue;
		/* <key>.lock, or <key>.git whose lock a prune that died removed first */
		if (strcmp(dot, ".lock") != 0 && strcmp(dot, ".git") != 0)
			continue;
		json_t *k = json_stringn(e->d_name, (size_t)(dot - e->d_name));
		bool seen = false;
		size_t i;
		json_t *v;
		json_array_foreach(keys, i, v) seen = seen || json_equal(v, k);
		if (seen)
			json_decref(k);
		else
			json_array_append_new(keys, k);
	}
	closedir(d);
	if (!keys)
		return cae_error_set(err, -ENOMEM, "out of memory");
	int r = 0;
	size_t i;
	json_t *k;
	json_array_foreach(keys, i, k)
	{
		int one = prune_one(root, json_string_value(k), max_age_s, all, removed, err);
		if (one < 0) {
			r = one;
			break;
		}
		*count += one;
	}
	json_decref(keys);
	return r;
}
