/* The rollback snapshot: `tar -cpf` of the whole workspace (every file, tracked or not,
 * ignored ones and .git included, with modes and symbolic links) taken before a patch, and
 * restored by emptying the workspace and extracting it (the protected paths left as they
 * are). On this host for local environments
 * (a private scratch directory named after its owner, $TMPDIR/cae-snap.<pid>-<start>.XXXXXX,
 * which `cae gc` removes once the owner is gone: base/scratch.h), in the environment
 * otherwise (its scratch directory, cae-snap.<boot>-<pid>-<start>.XXXXXX after the process
 * on this host that took it).
 *
 * A patch killed half-way is not left half applied: a whole snapshot is "armed" (the file
 * `armed` beside ws.tar, with the workspace in `root` and the protected paths in `protect`)
 * until its patch ended (disarmed first, then removed). An armed snapshot of a process that
 * is gone is restored, then removed, by the next patch of the same workspace and by
 * `cae gc` (cae_worker_recover_snapshots); never removed before (base/scratch.c keeps a
 * directory holding `armed`). */
#include "worker/worker-internal.h"

#include "base/fs.h"
#include "base/macro.h"
#include "base/scratch.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/banned.h"

struct wk_snapshot {
	wk_exec_ctx ctx;
	bool host;
	char *root; /* the workspace: on this host (host) or as commands see it */
	char *dir;  /* the snapshot's directory, holding ws.tar */
};

/* $1 workspace, $2 preferred scratch directory ("" for none), $3 the snapshot directory when
 * already made ("" for none), $4 the owner's tag for a directory made here, then the
 * protected paths. Arms the snapshot once it is whole; prints the snapshot dir. */
static const char take_script[] =
    "set -u\n"
    "root=$1 d=$3 owner=$4\n"
    "[ -n \"$d\" ] ||\n"
    "for s in \"$2\" \"${TMPDIR:-/tmp}\" /tmp; do\n"
    "  if [ -n \"$s\" ] && [ -d \"$s\" ] && [ -w \"$s\" ]; then\n"
    "    d=$(mktemp -d \"$s/cae-snap.$owner.XXXXXX\" 2>/dev/null) && break\n"
    "    d=\n"
    "  fi\n"
    "done\n"
    "[ -n \"$d\" ] || { echo 'no writable scratch directory for the snapshot' >&2; exit 1; }\n"
    "shift 4\n"
    "if ! tar -cpf \"$d/ws.tar\" -C \"$root\" . ||\n"
    "   ! printf '%s\\n' \"$root\" > \"$d/root\" ||\n"
    "   ! printf '%s\\n' \"$@\" > \"$d/protect\" ||\n"
    "   ! : > \"$d/armed\"; then rm -rf -- \"$d\"; exit 1; fi\n"
    "printf '%s\\n' \"$d\"\n";

/* $1 an armed snapshot directory, $2 restore_script: restores the workspace it recorded with
 * the protected paths it recorded, then disarms and removes it. */
static const char recover_script[] =
    "set -eu\n"
    "d=$1 restore=$2\n"
    "[ -f \"$d/armed\" ] || exit 0\n"
    "root=$(cat -- \"$d/root\")\n"
    "if [ ! -d \"$root\" ]; then rm -f -- \"$d/armed\"; rm -rf -- \"$d\"; exit 0; fi\n"
    "set --\n"
    "while IFS= read -r p || [ -n \"$p\" ]; do [ -z \"$p\" ] || set -- \"$@\" \"$p\"; done "
    "< \"$d/protect\"\n"
    "sh -c \"$restore\" cae-restore \"$root\" \"$d\" \"$@\"\n"
    "rm -f -- \"$d/armed\"\n"
    "rm -rf -- \"$d\"\n"
    "printf '%s\\n' \"$root\"\n";

/* $1 workspace, $2 snapshot dir, then the protected paths: each one is left as it is, and so
 * is every directory on the way to one (emptied of everything else): the environment keeps
 * them read-only (a read-only mount, another owner), and they are excluded from the
 * extraction; the directories on the way may be another owner's (root's, in a container),
 * so tar's failure to set their mode or times is no failure of the restore. */
static const char restore_script[] =
    "set -eu\n"
    "root=$1 d=$2\n"
    "shift 2\n"
    "[ -f \"$d/ws.tar\" ] || { echo \"the snapshot $d/ws.tar is gone\" >&2; exit 1; }\n"
    "mkdir -p -- \"$root\"\n"
    "cd -P -- \"$root\"\n"
    "[ \"$(pwd -P)\" != / ] || { echo 'refusing to restore over /' >&2; exit 1; }\n"
    "nl='\n'\n"
    "prot= anc=\n"
    "for p in \"$@\"; do\n"
    "  p=$(printf '%s\\n' \"$p\" | sed 's#//*#/#g; s#^\\(\\./\\)*##; s#/\\./#/#g; s#/$##')\n"
    "  prot=\"$prot$nl$p\"\n"
    "  a=${p%/*} b=$p\n"
    "  while [ \"$a\" != \"$b\" ]; do anc=\"$anc$nl$a\"; b=$a; a=${a%/*}; done\n"
    "done\n"
    "clean() {\n"
    "  for e in \"$1\"/* \"$1\"/.[!.]* \"$1\"/..?*; do\n"
    "    [ -e \"$e\" ] || [ -L \"$e\" ] || continue\n"
    "    r=${e#./}\n"
    "    case \"$prot$nl\" in *\"$nl$r$nl\"*) continue ;; esac\n"
    "    if [ -d \"$e\" ] && [ ! -L \"$e\" ]; then\n"
    "      case \"$anc$nl\" in *\"$nl$r$nl\"*) chmod u+w -- \"$e\" 2>/dev/null || :; clean \"$e\"; "
    "continue ;; esac\n"
    "      chmod -R u+w -- \"$e\" 2>/dev/null || :\n"
    "    fi\n"
    "    rm -rf -- \"$e\"\n"
    "  done\n"
    "}\n"
    "chmod u+w . 2>/dev/null || :\n"
    "clean .\n"
    "for p in \"$@\"; do\n"
    "  p=$(printf '%s\\n' \"$p\" | sed 's#//*#/#g; s#^\\(\\./\\)*##; s#/\\./#/#g; s#/$##')\n"
    "  set -- \"$@\" \"--exclude=./$p\" \"--exclude=./$p/*\"\n"
    "  shift\n"
    "done\n"
    "[ $# -gt 0 ] || exec tar -xpf \"$d/ws.tar\" -C .\n"
    "if ! err=$(tar -xpf \"$d/ws.tar\" -C . \"$@\" 2>&1 >/dev/null); then\n"
    "  rest=$(printf '%s\\n' \"$err\" | grep -v -e 'Cannot change mode to' -e 'Cannot utime' "
    "-e 'Exiting with failure status' || :)\n"
    "  [ -z \"$rest\" ] || { printf '%s\\n' \"$err\" >&2; exit 1; }\n"
    "fi\n";

static int run(wk_snapshot *s, const char *const *argv, cae_run_result *res, cae_error *err)
{
	int r = cae__wk_run(&s->ctx, s->host, s->host ? NULL : s->root, argv, NULL, 0, false, 65536,
			    res, err);
	if (r < 0)
		return r;
	if (res->exit_code != 0 || res->timed_out || res->cancelled) {
		size_t n = res->err_len;
		while (n && res->err[n - 1] == '\n')
			n--;
		if (res->timed_out)
			r = cae_error_set(err, -ETIMEDOUT, "timed out");
		else if (res->cancelled)
			r = cae_error_set(err, -ECANCELED, "cancelled");
		else
			r = cae_error_set(err, -EIO, "exit status %d: %.*s", res->exit_code,
					  (int)(n > 800 ? 800 : n), res->err);
		cae_run_result_clear(res);
		return r;
	}
	return 0;
}

/* This boot of this host: the first 8 characters of its boot id ("" when unknown). */
static void boot_tag(char out[9])
{
	out[0] = '\0';
	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	if (cae__read_file(AT_FDCWD, "/proc/sys/kernel/random/boot_id", 64, &text, &len) == 0 &&
	    len >= 8) {
		memcpy(out, text, 8);
		out[8] = '\0';
		for (int i = 0; i < 8; i++)
			if (!isxdigit((unsigned char)out[i]))
				out[0] = '\0';
	}
}

/* Whether a snapshot directory in an environment, cae-snap.<boot>-<pid>-<start>.XXXXXX, is
 * of a process of this boot of this host that is gone. One of another boot or host, or of an
 * older version (no owner in its name), is left alone: nothing tells whether its owner
 * lives. */
static bool env_owner_dead(const char *name)
{
	char boot[9];
	boot_tag(boot);
	const char *p = strncmp(name, "cae-snap.", 9) == 0 ? name + 9 : NULL;
	if (!p || !boot[0] || strncmp(p, boot, 8) != 0 || p[8] != '-')
		return false;
	bool owned;
	char rest[300];
	snprintf(rest, sizeof(rest), "cae-snap.%s", p + 9);
	return cae__scratch_owner_dead(rest, "cae-snap.", &owned) && owned;
}

int cae__wk_snapshot_take(const wk_exec_ctx *ctx, const char *root, const char *host_path,
			  const char *const *paths, size_t npaths, wk_snapshot **out,
			  cae_error *err)
{
	_cleanup_free_ wk_snapshot *s = calloc(1, sizeof(*s));
	if (!s)
		return cae_error_set(err, -ENOMEM, "out of memory");
	s->ctx = *ctx;
	/* the snapshot must be readable whatever happens later: not cancellable */
	s->ctx.cancel_fd = -1;
	s->host = host_path != NULL;
	s->root = strdup(host_path ? host_path : root);
	/* the environment's scratch: the workspace's sibling "tmp" (/workspace/tmp) */
	_cleanup_free_ char *scratch = NULL;
	if (!s->host) {
		const char *slash = strrchr(root, '/');
		size_t n = slash ? (size_t)(slash - root) : 0;
		if (asprintf(&scratch, "%.*s/tmp", (int)n, root) < 0)
			scratch = NULL;
	} else {
		scratch = strdup("");
	}
	if (!s->root || !scratch) {
		free(s->root);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	char made[4096] = "";
	if (s->host) {
		int m = cae__scratch_mkdtemp(NULL, "cae-snap.", made, sizeof(made));
		if (m < 0) {
			free(s->root);
			return cae_error_set(err, m,
					     "cannot take the rollback snapshot: cannot make a "
					     "scratch directory: %s",
					     strerror(-m));
		}
	}
	char owner[64] = "";
	if (!s->host) {
		char boot[9];
		boot_tag(boot);
		pid_t pid = getpid();
		snprintf(owner, sizeof(owner), "%s-%d-%llu", boot[0] ? boot : "00000000", (int)pid,
			 cae__process_start_time(pid));
	}
	_cleanup_free_ const char **argv = calloc(npaths + 9, sizeof(char *));
	if (!argv) {
		if (made[0])
			(void)cae__rm_rf(made);
		free(s->root);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	size_t k = 0;
	argv[k++] = "sh";
	argv[k++] = "-c";
	argv[k++] = take_script;
	argv[k++] = "cae-snapshot";
	argv[k++] = s->root;
	argv[k++] = scratch;
	argv[k++] = made;
	argv[k++] = owner;
	for (size_t i = 0; i < npaths; i++)
		argv[k++] = paths[i];
	argv[k] = NULL;
	cae_run_result res;
	int r = run(s, argv, &res, err);
	if (r < 0) {
		if (made[0])
			(void)cae__rm_rf(made);
		free(s->root);
		return cae_error_prefix(err, "cannot take the rollback snapshot");
	}
	size_t n = res.out_len;
	while (n && res.out[n - 1] == '\n')
		n--;
	s->dir = strndup(res.out, n);
	cae_run_result_clear(&res);
	if (!s->dir || !*s->dir) {
		free(s->root);
		free(s->dir);
		return cae_error_set(err, -EIO, "cannot take the rollback snapshot: no directory");
	}
	*out = TAKE_PTR(s);
	return 0;
}

int cae__wk_snapshot_restore(wk_snapshot *s, const char *const *paths, size_t n, cae_error *err)
{
	_cleanup_free_ const char **argv = calloc(n + 8, sizeof(char *));
	if (!argv)
		return cae_error_set(err, -ENOMEM, "out of memory");
	size_t k = 0;
	argv[k++] = "sh";
	argv[k++] = "-c";
	argv[k++] = restore_script;
	argv[k++] = "cae-restore";
	argv[k++] = s->root;
	argv[k++] = s->dir;
	for (size_t i = 0; i < n; i++)
		argv[k++] = paths[i];
	argv[k] = NULL;
	cae_run_result res;
	int r = run(s, argv, &res, err);
	if (r < 0)
		return cae_error_prefix(err, "rollback failed");
	cae_run_result_clear(&res);
	return 0;
}

void cae__wk_snapshot_keep(wk_snapshot *s)
{
	if (!s)
		return;
	free(s->root);
	free(s->dir);
	free(s);
}

const char *cae__wk_snapshot_dir(const wk_snapshot *s)
{
	return s ? s->dir : NULL;
}

void cae__wk_snapshot_free(wk_snapshot *s)
{
	if (!s)
		return;
	if (s->dir) {
		/* disarmed first: a kill in between leaves a snapshot that nothing restores */
		const char *argv[] = {
		    "sh",   "-c", "rm -f -- \"$1/armed\" && rm -rf -- \"$1\"", "cae-snapshot-done",
		    s->dir, NULL};
		cae_run_result res;
		if (cae__wk_run(&s->ctx, s->host, s->host ? NULL : s->root, argv, NULL, 0, false,
				4096, &res, NULL) == 0)
			cae_run_result_clear(&res);
	}
	free(s->root);
	free(s->dir);
	free(s);
}

/* Restores the armed snapshot dir (recover_script, on this host or in the environment) and
 * counts it. */
static int recover_one(const wk_exec_ctx *ctx, bool host, const char *cwd, const char *dir,
		       unsigned *restored, cae_error *err)
{
	const char *argv[] = {"sh", "-c", recover_script, "cae-recover", dir, restore_script, NULL};
	cae_run_result res;
	int r;
	if (host) {
		cae_run_spec spec = {.argv = argv,
				     .timeout_ms = 600000,
				     .max_stdout = 65536,
				     .max_stderr = 65536,
				     .cancel_fd = -1};
		r = cae_runner_run(&spec, &res, err);
	} else {
		r = cae__wk_run(ctx, false, cwd, argv, NULL, 0, false, 65536, &res, err);
	}
	if (r < 0)
		return cae_error_prefix(err, "restoring the snapshot %s", dir);
	if (res.exit_code != 0 || res.timed_out) {
		r = cae_error_set(err, -EIO, "restoring the snapshot %s: exit status %d: %.400s",
				  dir, res.exit_code, res.err ? res.err : "");
		cae_run_result_clear(&res);
		return r;
	}
	cae_run_result_clear(&res);
	(*restored)++;
	return 0;
}

/* The workspace an armed snapshot on this host recorded: 1 with *root (new), 0 when the
 * directory holds no armed snapshot. */
static int armed_root(int dfd, const char *name, char **root)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/armed", name);
	if (faccessat(dfd, path, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	snprintf(path, sizeof(path), "%s/root", name);
	size_t len = 0;
	if (cae__read_file(dfd, path, 8192, root, &len) < 0)
		return 0;
	while (len && (*root)[len - 1] == '\n')
		(*root)[--len] = '\0';
	return 1;
}

static int recover_host_dir(const char *base, const char *workspace, unsigned *restored,
			    cae_error *err)
{
	DIR *d = opendir(base);
	if (!d)
		return 0;
	int ret = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		bool owned;
		if (strncmp(de->d_name, "cae-snap.", 9) != 0 ||
		    !cae__scratch_owner_dead(de->d_name, "cae-snap.", &owned) || !owned)
			continue;
		_cleanup_free_ char *root = NULL;
		if (armed_root(dirfd(d), de->d_name, &root) <= 0)
			continue;
		if (workspace && strcmp(root, workspace) != 0)
			continue;
		_cleanup_free_ char *dir = cae__path_join(base, de->d_name);
		cae_error e;
		cae_error_clear(&e);
		int r = dir ? recover_one(NULL, true, NULL, dir, restored, &e) : -ENOMEM;
		if (r < 0 && ret == 0)
			ret = cae_error_set(err, r, "%s", e.message[0] ? e.message : strerror(-r));
	}
	closedir(d);
	return ret;
}

int cae_worker_recover_snapshots(const char *workspace, unsigned *restored, cae_error *err)
{
	unsigned n = 0;
	const char *t = getenv("TMPDIR");
	if (!t || !*t)
		t = "/tmp";
	int r = recover_host_dir(t, workspace, &n, err);
	if (strcmp(t, "/tmp") != 0) {
		int r2 = recover_host_dir("/tmp", workspace, &n, r < 0 ? NULL : err);
		if (r == 0)
			r = r2;
	}
	if (restored)
		*restored += n;
	return r;
}

/* $1 the environment's scratch directory, $2 the workspace: every armed snapshot of it. */
static const char list_armed_script[] =
    "for d in \"$1\"/cae-snap.*; do\n"
    "  [ -f \"$d/armed\" ] && [ \"$(cat -- \"$d/root\" 2>/dev/null)\" = \"$2\" ] &&\n"
    "    printf '%s\\n' \"${d##*/}\"\n"
    "done\n"
    ":\n";

int cae__wk_snapshot_recover_env(const wk_exec_ctx *ctx, const char *root, unsigned *restored,
				 cae_error *err)
{
	const char *slash = strrchr(root, '/');
	_cleanup_free_ char *scratch = NULL;
	if (asprintf(&scratch, "%.*s/tmp", (int)(slash ? slash - root : 0), root) < 0)
		return cae_error_set(err, -ENOMEM, "out of memory");
	const char *argv[] = {"sh", "-c", list_armed_script, "cae-armed", scratch, root, NULL};
	cae_run_result res;
	int r = cae__wk_run(ctx, false, NULL, argv, NULL, 0, false, 65536, &res, err);
	if (r < 0)
		return r;
	int ret = 0;
	for (char *line = res.out, *nl; line && *line; line = nl ? nl + 1 : NULL) {
		nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		if (!env_owner_dead(line))
			continue;
		_cleanup_free_ char *dir = cae__path_join(scratch, line);
		cae_error e;
		cae_error_clear(&e);
		int q = dir ? recover_one(ctx, false, NULL, dir, restored, &e) : -ENOMEM;
		if (q < 0 && ret == 0)
			ret = cae_error_set(err, q, "%s", e.message[0] ? e.message : strerror(-q));
	}
	cae_run_result_clear(&res);
	return ret;
}
