/* The guard of .git/config in a workspace the user owns (the local backend's --workspace):
 * what a command, the text editor or a patch writes there must never run in the user's own
 * git on the host, which reads that file. A key that runs a program or pulls in another file
 * (core.fsmonitor, core.hooksPath, core.sshCommand, core.pager, alias.* with '!', filter.*,
 * diff.external, *.textconv, credential.*, include.path, includeIf.*, url.*.insteadOf, ...:
 * `git help config` names dozens, and new ones come with each git) is not listed one by one:
 * the rule is an allow list.
 *
 *   When the workspace is taken (prepare), its .git/config is recorded in cae's own state
 *   (<state>/local/<uuid>/git-config.recorded; empty when there is no .git yet). After each
 *   command, patch and editor write, every entry of .git/config is kept when its key is on
 *   the allow list below (known harmless: remote URLs and refspecs, branch tracking, the
 *   identity, init/pull/push/fetch/merge/rebase preferences, the repository's format) or when
 *   the user had that very entry (key and value) when the workspace was taken; every other
 *   entry goes, and every entry of the user's that is off the list and was removed comes back.
 *   So off the list, the file holds exactly what the user had. Values that name where a push
 *   goes are checked too (entry_ok): a remote's url/pushurl must be on another machine (a
 *   network URL or host:path) and a branch's remote/pushRemote "." or a remote whose URL may
 *   stay, unless the user had that very entry: a push to a repository the agent made in the
 *   workspace would run that repository's hooks.
 *
 * The file is read with git itself (`git config --file <a private copy> --no-includes --list
 * -z`, CAE_GIT_ARGV, the environment of hostgit.c), never by a parser of ours; the filtered
 * file is written by git (`git config --file <private> --add`) and put in place with one
 * rename (cae__write_atomic, the owner and mode kept), so a concurrent git on the host reads
 * the old file or the new one, never half of it. An unchanged file costs one read and a
 * compare with the last one the guard left (git-config.good). A .git that is not a directory
 * (a gitfile or link an agent made in place of a missing .git) and a .git/commondir that was
 * not there when the workspace was taken are removed: both would point the host's git at a
 * configuration elsewhere. */
#include "backend/backend-internal.h"

#include "base/fs.h"
#include "base/gitsafe.h"
#include "base/macro.h"
#include "cae/log.h"
#include "cae/runner.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

#define RECORD "git-config.recorded"
#define GOOD "git-config.good"
#define COMMONDIR "git-commondir.recorded"
#define SCRATCH ".git-config.guard"
#define LOCK "git-config.lock" /* one guard at a time per environment (its scratch file) */
#define CONFIG_MAX (1u << 20)
#define LIST_MAX (4u << 20)
#define GIT_TIMEOUT_MS 30000

/* Keys an agent may set that run nothing and read no other file in the host's git. A '*'
 * stands for a subsection (remote.<name>.url). */
static const char *const allowed[] = {
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "core.autocrlf",
    "core.eol",
    "core.safecrlf",
    "core.quotepath",
    "core.checkstat",
    "core.trustctime",
    "core.abbrev",
    "extensions.objectformat",
    "remote.*.url",
    "remote.*.pushurl",
    "remote.*.fetch",
    "remote.*.push",
    "remote.*.tagopt",
    "remote.*.prune",
    "remote.*.prunetags",
    "remote.*.mirror",
    "remote.*.skipdefaultupdate",
    "remote.*.skipfetchall",
    "branch.*.remote",
    "branch.*.pushremote",
    "branch.*.merge",
    "branch.*.rebase",
    "branch.*.description",
    "user.name",
    "user.email",
    "author.name",
    "author.email",
    "committer.name",
    "committer.email",
    "init.defaultbranch",
    "pull.rebase",
    "pull.ff",
    "push.default",
    "push.autosetupremote",
    "push.followtags",
    "fetch.prune",
    "fetch.prunetags",
    "merge.ff",
    "merge.conflictstyle",
    "rebase.autosquash",
    "rebase.autostash",
    "status.showuntrackedfiles",
    "color.ui",
    "advice.*",
};

/* True when key (as git lists it: section and name in lower case) is on the allow list. */
static bool key_allowed(const char *key)
{
	const char *first = strchr(key, '.');
	const char *last = strrchr(key, '.');
	if (!first)
		return false;
	for (size_t i = 0; i < ARRAY_SIZE(allowed); i++) {
		const char *a = allowed[i];
		size_t sl = (size_t)(strchr(a, '.') - a);
		if ((size_t)(first - key) != sl || strncmp(key, a, sl) != 0)
			continue;
		const char *rest = a + sl + 1;
		if (strncmp(rest, "*.", 2) == 0) {
			/* section.<subsection>.name */
			if (last != first && strcmp(last + 1, rest + 2) == 0)
				return true;
		} else if (strcmp(rest, "*") == 0) {
			if (last == first)
				return true;
		} else if (last == first && strcmp(first + 1, rest) == 0) {
			return true;
		}
	}
	return false;
}

/* One entry of a configuration file as git lists it. */
struct entry {
	char *key;
	char *value; /* NULL: a key without '=' (true) */
	bool used;
};

struct entries {
	struct entry *v;
	size_t n;
	char *text; /* the listing the strings point into */
};

static void entries_clear(struct entries *e)
{
	free(e->v);
	free(e->text);
	*e = (struct entries){0};
}

/* Runs CAE_GIT_ARGV + args on this host in the environment of hostgit.c. */
static int run_git(const cae_config *cfg, const char *cwd, const char *const *args,
		   cae_run_result *res, cae_error *err)
{
	const char *argv[CAE_GIT_ARGC + 16] = {CAE_GIT_ARGV};
	size_t n = CAE_GIT_ARGC;
	for (size_t i = 0; args[i]; i++) {
		if (n + 1 >= ARRAY_SIZE(argv))
			return cae_error_set(err, -E2BIG, "git: too many arguments");
		argv[n++] = args[i];
	}
	argv[n] = NULL;
	char **envp = NULL;
	int r = cae__hostgit_env(cfg, NULL, &envp, err);
	if (r < 0)
		return r;
	cae_run_spec spec = {.argv = argv,
			     .cwd = cwd,
			     .envp = (const char *const *)envp,
			     .timeout_ms = GIT_TIMEOUT_MS,
			     .max_stdout = LIST_MAX,
			     .max_stderr = 4096,
			     .cancel_fd = -1};
	r = cae_runner_run(&spec, res, err);
	cae__hostgit_env_free(envp);
	return r;
}

/* The entries of the configuration text data[0..len), read by git from a private copy in
 * dir. 1 (and no entries): git cannot read the text. */
static int list_entries(const cae_config *cfg, const char *dir, const char *data, size_t len,
			struct entries *out, cae_error *err)
{
	*out = (struct entries){0};
	if (len == 0)
		return 0;
	_cleanup_free_ char *copy = cae__path_join(dir, SCRATCH);
	if (!copy)
		return cae_error_set(err, -ENOMEM, "out of memory");
	int r = cae__write_file_atomic(AT_FDCWD, copy, data, len, 0600, false);
	if (r < 0)
		return cae_error_set(err, r, "the copy of .git/config: %s", strerror(-r));
	const char *args[] = {"config", "--file", copy, "--no-includes", "--list", "-z", NULL};
	cae_run_result res;
	r = run_git(cfg, "/", args, &res, err);
	unlink(copy);
	if (r < 0)
		return r;
	if (res.exit_code != 0 || res.out_truncated || !res.out) {
		cae_run_result_clear(&res);
		return 1;
	}
	size_t n = 0;
	for (size_t i = 0; i < res.out_len; i++)
		n += res.out[i] == '\0';
	out->text = TAKE_PTR(res.out);
	size_t total = res.out_len;
	cae_run_result_clear(&res);
	out->v = calloc(n ? n : 1, sizeof(*out->v));
	if (!out->v) {
		entries_clear(out);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	for (size_t off = 0; off < total && out->n < n;) {
		char *s = out->text + off;
		size_t l = strlen(s);
		char *nl = strchr(s, '\n');
		if (nl)
			*nl = '\0';
		out->v[out->n++] = (struct entry){.key = s, .value = nl ? nl + 1 : NULL};
		off += l + 1;
	}
	return 0;
}

static bool same_value(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Marks and returns an unused entry of e equal to (key, value), NULL when none. */
static struct entry *take(struct entries *e, const char *key, const char *value)
{
	for (size_t i = 0; i < e->n; i++)
		if (!e->v[i].used && strcmp(e->v[i].key, key) == 0 &&
		    same_value(e->v[i].value, value)) {
			e->v[i].used = true;
			return &e->v[i];
		}
	return NULL;
}

/* True when e holds an entry (key, value), used or not. */
static bool has_entry(const struct entries *e, const char *key, const char *value)
{
	for (size_t i = 0; i < e->n; i++)
		if (strcmp(e->v[i].key, key) == 0 && same_value(e->v[i].value, value))
			return true;
	return false;
}

/* A place on another machine: a URL of a network transport, or scp-like host:path. Not a
 * local path or file:// URL (a repository the agent made: a push there runs its hooks), nor
 * <helper>::<address> (a remote helper's). */
static bool network_url(const char *v)
{
	static const char *const schemes[] = {"https://", "http://",	"git://",
					      "ssh://",	  "git+ssh://", "ssh+git://"};
	if (!v)
		return false;
	for (size_t i = 0; i < ARRAY_SIZE(schemes); i++)
		if (strncasecmp(v, schemes[i], strlen(schemes[i])) == 0)
			return true;
	if (strstr(v, "://") || strstr(v, "::"))
		return false;
	const char *colon = strchr(v, ':'), *slash = strchr(v, '/');
	return colon && colon != v && v[0] != '-' && (!slash || colon < slash);
}

/* True when key names section.<sub>.name (name in lower case, as git lists it). */
static bool sub_key(const char *key, const char *section, const char *name)
{
	size_t sl = strlen(section);
	const char *last = strrchr(key, '.');
	return strncmp(key, section, sl) == 0 && key[sl] == '.' && last && last > key + sl &&
	       strcmp(last + 1, name) == 0;
}

/* The remote's URL in now is one that may stay (on another machine, or the user's own). */
static bool remote_ok(const struct entries *now, const struct entries *mine, const char *name)
{
	_cleanup_free_ char *key = NULL;
	if (asprintf(&key, "remote.%s.url", name) < 0)
		return false;
	for (size_t i = 0; i < now->n; i++)
		if (strcmp(now->v[i].key, key) == 0 &&
		    (network_url(now->v[i].value) || has_entry(mine, key, now->v[i].value)))
			return true;
	return false;
}

/* An entry that may stay whoever wrote it: its key is on the allow list, and where the value
 * names where a push goes (remote URLs, a branch's remote), that place is another machine or
 * a remote whose URL may stay: a push to a repository the agent made would run its hooks. */
static bool entry_ok(const struct entries *now, const struct entries *mine, const struct entry *e)
{
	if (!key_allowed(e->key))
		return false;
	if (sub_key(e->key, "remote", "url") || sub_key(e->key, "remote", "pushurl"))
		return network_url(e->value);
	if (sub_key(e->key, "branch", "remote") || sub_key(e->key, "branch", "pushremote"))
		return e->value && (strcmp(e->value, ".") == 0 || remote_ok(now, mine, e->value));
	return true;
}

/* .git of project as a directory fd (-ENOENT: none; -ENOTDIR: something else is there). */
static int open_gitdir(const char *project, int *pfd_out)
{
	*pfd_out = open(project, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (*pfd_out < 0)
		return -errno;
	int fd = cae__open_beneath(*pfd_out, ".git", O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
	if (fd == -ELOOP)
		return -ENOTDIR;
	return fd;
}

/* The text of .git/config (empty when missing); *regular: it is a regular file. */
static int read_config(int gfd, char **text, size_t *len, bool *regular)
{
	*text = NULL;
	*len = 0;
	*regular = false;
	int fd = openat(gfd, "config", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT) {
			*regular = true; /* nothing to replace */
			return 0;
		}
		return 0; /* a link or something else: replaced */
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return 0;
	}
	*regular = true;
	int r = cae__read_fd(fd, CONFIG_MAX, text, len);
	close(fd);
	return r;
}

int cae__gitguard_record(const char *project, const char *dir, cae_error *err)
{
	_cleanup_close_ int pfd = -1;
	_cleanup_close_ int gfd = open_gitdir(project, &pfd);
	if (gfd == -ENOTDIR)
		return 0; /* a gitfile of the user's (a linked worktree): not guarded */
	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	bool regular = true;
	if (gfd >= 0) {
		int r = read_config(gfd, &text, &len, &regular);
		if (r < 0)
			return cae_error_set(err, r, "cannot read the workspace's .git/config: %s",
					     strerror(-r));
		_cleanup_free_ char *cd = NULL;
		size_t cl = 0;
		if (cae__read_file(gfd, "commondir", 4096, &cd, &cl) == 0) {
			_cleanup_free_ char *p = cae__path_join(dir, COMMONDIR);
			r = p ? cae__write_file_atomic(AT_FDCWD, p, cd, cl, 0600, false) : -ENOMEM;
			if (r < 0)
				return cae_error_set(err, r, "cannot record .git/commondir: %s",
						     strerror(-r));
		}
	}
	_cleanup_free_ char *rec = cae__path_join(dir, RECORD);
	_cleanup_free_ char *good = cae__path_join(dir, GOOD);
	if (!rec || !good)
		return cae_error_set(err, -ENOMEM, "out of memory");
	int r = cae__write_file_atomic(AT_FDCWD, good, text ? text : "", len, 0600, false);
	if (r == 0)
		r = cae__write_file_atomic(AT_FDCWD, rec, text ? text : "", len, 0600, false);
	return r < 0 ? cae_error_set(err, r, "cannot record the workspace's .git/config: %s",
				     strerror(-r))
		     : 0;
}

/* The new configuration file (built by git in dir from the kept entries), its text. */
static int build(const cae_config *cfg, const char *dir, const struct entries *keep, char **text,
		 size_t *len, cae_error *err)
{
	_cleanup_free_ char *path = cae__path_join(dir, SCRATCH);
	if (!path)
		return cae_error_set(err, -ENOMEM, "out of memory");
	int r = cae__write_file_atomic(AT_FDCWD, path, "", 0, 0600, false);
	for (size_t i = 0; r == 0 && i < keep->n; i++) {
		const struct entry *e = &keep->v[i];
		const char *args[] = {
		    "config", "--file", path, "--add", e->key, e->value ? e->value : "true", NULL};
		cae_run_result res;
		r = run_git(cfg, "/", args, &res, err);
		if (r < 0)
			break;
		if (res.exit_code != 0)
			r = cae_error_set(err, -EIO, "git config --add %s: %s", e->key,
					  res.err ? res.err : "failed");
		cae_run_result_clear(&res);
	}
	if (r == 0)
		r = cae__read_file(AT_FDCWD, path, CONFIG_MAX, text, len);
	unlink(path);
	return r < 0 ? cae_error_prefix(err, "the filtered .git/config") : 0;
}

struct fill_text {
	const char *text;
	size_t len;
};

static int fill_text(void *ctx, int fd)
{
	const struct fill_text *f = ctx;
	for (size_t off = 0; off < f->len;) {
		ssize_t w = write(fd, f->text + off, f->len - off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		off += (size_t)w;
	}
	return 0;
}

/* Removes what would point the host's git at another configuration: a .git that is not a
 * directory, a .git/commondir that the user did not have. */
static void remove_pointers(int pfd, int gfd, const char *dir, json_t *removed)
{
	if (gfd == -ENOTDIR) {
		if (unlinkat(pfd, ".git", 0) == 0 || cae__rm_rf_at(pfd, ".git") == 0)
			json_array_append_new(removed, json_string(".git (not a directory)"));
		return;
	}
	if (gfd < 0)
		return;
	struct stat st;
	if (fstatat(gfd, "commondir", &st, AT_SYMLINK_NOFOLLOW) < 0)
		return;
	_cleanup_free_ char *p = cae__path_join(dir, COMMONDIR);
	_cleanup_free_ char *mine = NULL, *now = NULL;
	size_t ml = 0, nl = 0;
	if (p && cae__read_file(AT_FDCWD, p, 4096, &mine, &ml) == 0 && S_ISREG(st.st_mode) &&
	    cae__read_file(gfd, "commondir", 4096, &now, &nl) == 0 && ml == nl &&
	    memcmp(mine, now, ml) == 0)
		return;
	if (cae__rm_rf_at(gfd, "commondir") == 0)
		json_array_append_new(removed, json_string(".git/commondir"));
}

/* .git/config of gfd back to the rule; names of the entries that went are added to removed. */
static int filter_config(const cae_config *cfg, int gfd, const char *dir, const char *rec,
			 size_t rec_len, const char *good_path, json_t *removed, cae_error *err)
{
	_cleanup_free_ char *good = NULL, *cur = NULL, *text = NULL;
	size_t good_len = 0, cur_len = 0, len = 0;
	bool regular = false;
	int r = read_config(gfd, &cur, &cur_len, &regular);
	if (r == -EFBIG) {
		regular = false; /* replaced whole */
		cur_len = 0;
	} else if (r < 0) {
		return cae_error_set(err, r, "cannot read .git/config: %s", strerror(-r));
	}
	if (regular && cae__read_file(AT_FDCWD, good_path, CONFIG_MAX, &good, &good_len) == 0 &&
	    good_len == cur_len && memcmp(good, cur ? cur : "", cur_len) == 0)
		return 0; /* as the guard left it */
	struct entries now = {0}, mine = {0}, keep = {0};
	r = regular ? list_entries(cfg, dir, cur ? cur : "", cur_len, &now, err) : 1;
	if (r == 1) {
		/* a link, a file git cannot read, one too large: the user's file comes back */
		regular = false;
		r = list_entries(cfg, dir, rec, rec_len, &now, err);
	}
	if (r >= 0)
		r = list_entries(cfg, dir, rec, rec_len, &mine, err);
	if (r == 1)
		r = 0; /* the user's own file was unreadable to git: nothing of it to keep */
	if (r == 0 && !(keep.v = calloc(now.n + mine.n + 1, sizeof(*keep.v))))
		r = cae_error_set(err, -ENOMEM, "out of memory");
	bool changed = !regular;
	for (size_t i = 0; r == 0 && i < now.n; i++) {
		struct entry *e = &now.v[i];
		if (entry_ok(&now, &mine, e) || take(&mine, e->key, e->value)) {
			keep.v[keep.n++] = *e;
		} else {
			changed = true;
			json_array_append_new(removed, json_string(e->key));
		}
	}
	/* the user's own entries off the list that a command removed or changed */
	for (size_t i = 0; r == 0 && i < mine.n; i++)
		if (!mine.v[i].used && !entry_ok(&mine, &mine, &mine.v[i])) {
			keep.v[keep.n++] = mine.v[i];
			changed = true;
		}
	if (r == 0 && changed)
		r = build(cfg, dir, &keep, &text, &len, err);
	if (r == 0 && changed) {
		struct stat st;
		bool exists = fstatat(gfd, "config", &st, AT_SYMLINK_NOFOLLOW) == 0;
		mode_t mode = exists && S_ISREG(st.st_mode) ? st.st_mode & 0777 : 0644;
		if (exists && S_ISDIR(st.st_mode))
			cae__rm_rf_at(gfd, "config");
		struct fill_text f = {.text = text ? text : "", .len = len};
		r = cae__write_atomic(gfd, "config", mode, 0, fill_text, &f);
		if (r < 0)
			cae_error_set(err, r, "cannot write .git/config: %s", strerror(-r));
	}
	if (r == 0)
		r = cae__write_file_atomic(AT_FDCWD, good_path,
					   changed ? (text ? text : "") : (cur ? cur : ""),
					   changed ? len : cur_len, 0600, false);
	free(keep.v);
	entries_clear(&now);
	entries_clear(&mine);
	return r;
}

int cae__gitguard_enforce(const cae_config *cfg, cae_log *log, const char *uuid,
			  const char *project, const char *dir, cae_error *err)
{
	_cleanup_free_ char *rec_path = cae__path_join(dir, RECORD);
	_cleanup_free_ char *good_path = cae__path_join(dir, GOOD);
	if (!rec_path || !good_path)
		return cae_error_set(err, -ENOMEM, "out of memory");
	_cleanup_free_ char *rec = NULL;
	size_t rec_len = 0;
	int r = cae__read_file(AT_FDCWD, rec_path, CONFIG_MAX, &rec, &rec_len);
	if (r == -ENOENT)
		return 0; /* prepared without the guard (an older cae, a gitfile) */
	if (r < 0)
		return cae_error_set(err, r, "the recorded .git/config: %s", strerror(-r));
	_cleanup_(json_decrefp) json_t *removed = json_array();
	if (!removed)
		return cae_error_set(err, -ENOMEM, "out of memory");
	/* concurrent commands of one environment end at the same time: one guard after another */
	_cleanup_free_ char *lock_path = cae__path_join(dir, LOCK);
	if (!lock_path)
		return cae_error_set(err, -ENOMEM, "out of memory");
	_cleanup_close_ int lock = open(lock_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (lock < 0 || flock(lock, LOCK_EX) < 0)
		return cae_error_set(err, -errno, "the lock of the .git/config guard: %s",
				     strerror(errno));
	_cleanup_close_ int pfd = -1;
	_cleanup_close_ int gfd = open_gitdir(project, &pfd);
	if (pfd < 0)
		return 0; /* the workspace is gone: nothing to guard */
	remove_pointers(pfd, gfd, dir, removed);
	if (gfd >= 0)
		r = filter_config(cfg, gfd, dir, rec, rec_len, good_path, removed, err);
	if (json_array_size(removed) > 0)
		cae_log_fields(log, CAE_LOG_WARN, "git.config_guard",
			       json_pack("{s:s, s:O}", "task_uuid", uuid, "removed", removed),
			       "removed from the workspace's .git/config what the user's git "
			       "would run");
	return r < 0 ? r : 0;
}
