/* The rollback snapshot: `tar -cpf` of the whole workspace (every file, tracked or not,
 * ignored ones and .git included, with modes and symbolic links) taken before a patch, and
 * restored by emptying the workspace and extracting it (the protected paths left as they
 * are). On this host for local environments
 * (a private scratch directory named after its owner, $TMPDIR/cae-snap.<pid>-<start>.XXXXXX,
 * which `cae gc` removes once the owner is gone: base/scratch.h), in the environment
 * otherwise (its scratch directory). */
#include "worker/worker-internal.h"

#include "base/fs.h"
#include "base/macro.h"
#include "base/scratch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

struct wk_snapshot {
	wk_exec_ctx ctx;
	bool host;
	char *root; /* the workspace: on this host (host) or as commands see it */
	char *dir;  /* the snapshot's directory, holding ws.tar */
};

/* $1 workspace, $2 preferred scratch directory ("" for none), $3 the snapshot directory when
 * already made ("" for none). Prints the snapshot dir. */
static const char take_script[] =
    "set -u\n"
    "root=$1 d=$3\n"
    "[ -n \"$d\" ] ||\n"
    "for s in \"$2\" \"${TMPDIR:-/tmp}\" /tmp; do\n"
    "  if [ -n \"$s\" ] && [ -d \"$s\" ] && [ -w \"$s\" ]; then\n"
    "    d=$(mktemp -d \"$s/cae-snap.XXXXXX\" 2>/dev/null) && break\n"
    "    d=\n"
    "  fi\n"
    "done\n"
    "[ -n \"$d\" ] || { echo 'no writable scratch directory for the snapshot' >&2; exit 1; }\n"
    "if ! tar -cpf \"$d/ws.tar\" -C \"$root\" . ; then rm -rf -- \"$d\"; exit 1; fi\n"
    "printf '%s\\n' \"$d\"\n";

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

int cae__wk_snapshot_take(const wk_exec_ctx *ctx, const char *root, const char *host_path,
			  wk_snapshot **out, cae_error *err)
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
	const char *argv[] = {"sh",    "-c",	take_script, "cae-snapshot",
			      s->root, scratch, made,	     NULL};
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

void cae__wk_snapshot_free(wk_snapshot *s)
{
	if (!s)
		return;
	if (s->dir) {
		const char *argv[] = {"rm", "-rf", "--", s->dir, NULL};
		cae_run_result res;
		if (cae__wk_run(&s->ctx, s->host, s->host ? NULL : s->root, argv, NULL, 0, false,
				4096, &res, NULL) == 0)
			cae_run_result_clear(&res);
	}
	free(s->root);
	free(s->dir);
	free(s);
}
