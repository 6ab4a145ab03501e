/* The environment file system through commands (any backend; used when the environment's
 * files are not on this host). Each operation is one `sh -c SCRIPT` in the environment that
 * resolves the target there: every directory on the way is canonicalised (cd -P) and must lie
 * inside the workspace's canonical path, missing directories are made one by one inside it, a
 * final symbolic link is followed only when its target is inside. Writes go to a temporary
 * file in the target's directory (checked for length) renamed over the target; reads come
 * back base64-encoded (od when base64 is missing), since command output is text. Also the
 * process helper cae__wk_run().
 *
 * Transactions (txn_*): each staged version is written beside its target as
 * .cae-tmp-<token>-<n>, announced first in the environment's journal
 * (<workspace>/../.cae-journal when writable, else <workspace>/.cae-journal;
 * <token>.journal: "S", staged path, target path). The commit writes the final list of
 * changes to <token>.journal.c, renames it to <token>.journal.commit (the commit point) and
 * applies it (mv of each staged file, rm of each removed target), then removes the rest.
 * Tokens are <pid>-<start>.<n> of the cae process on this host: opening the file system
 * completes (a .commit exists) or rolls back (staged files removed) the transactions of
 * processes that are gone. */
#include "worker/worker-internal.h"

#include "base/buf.h"
#include "base/macro.h"
#include "base/utf8.h"
#include "base/scratch.h"
#include "base/txn.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/banned.h"

/* Exit statuses of the script: 64 + errno. */
#define X_ENOENT 66
#define X_EIO 69
#define X_EACCES 77
#define X_ENOTDIR 84
#define X_EISDIR 85
#define X_EINVAL 86
#define X_EFBIG 91

/* $1 op (read|stat|write|remove|stage|unstage), $2 workspace, $3 relative path, $4 max bytes
 * (read) or mode ("keep" or octal, write, stage), $5 length of the data on stdin (write,
 * stage), $6 transaction token and $7 index (stage). stage and unstage print the target's
 * canonical path. */
static const char fs_script[] =
    "set -fu\n"
    "op=$1 root=$2 rel=$3 arg=$4 want=$5 tok=${6:-} idx=${7:-}\n"
    "nl='\n'\n"
    "die() { printf '%s\\n' \"$2\" >&2; exit \"$1\"; }\n"
    "canon() { R=$(cd -P -- \"$1\" 2>/dev/null && pwd -P && echo x) || return 1; "
    "R=${R%\"${nl}x\"}; }\n"
    "canon \"$root\" || die 66 \"the workspace $root does not exist\"\n"
    "root=$R\n"
    "inside() { case $1 in \"$root\"|\"$root\"/*) return 0;; esac; return 1; }\n"
    "case $rel in */*) dir=${rel%/*} base=${rel##*/};; *) dir= base=$rel;; esac\n"
    "cur=$root\n"
    "if [ -n \"$dir\" ]; then\n"
    "  IFS=/\n"
    "  set -- $dir\n"
    "  IFS=' \t\n'\n"
    "  for c do\n"
    "    n=$cur/$c\n"
    "    if [ -d \"$n\" ]; then\n"
    "      canon \"$n\" || die 69 \"$rel: cannot resolve $c\"\n"
    "      inside \"$R\" || die 77 \"$rel: security error: a symbolic link on the way leads "
    "outside the workspace\"\n"
    "      cur=$R\n"
    "    elif [ -e \"$n\" ]; then die 84 \"$rel: a component of the path is not a directory\"\n"
    "    elif [ -L \"$n\" ]; then die 77 \"$rel: security error: a symbolic link on the way "
    "leads to a missing directory\"\n"
    "    elif [ \"$op\" = write ] || [ \"$op\" = stage ]; then mkdir -- \"$n\" || die 69 "
    "\"$rel: cannot create the directory $c\"; cur=$n\n"
    "    else die 66 \"$rel: no such file or directory\"\n"
    "    fi\n"
    "  done\n"
    "fi\n"
    "t=$cur/$base\n"
    "if [ \"$op\" != remove ] && [ \"$op\" != unstage ] && [ -L \"$t\" ]; then\n"
    "  if [ -e \"$t\" ]; then\n"
    "    r=$(readlink -f -- \"$t\" && echo x) || die 77 \"$rel: cannot resolve the symbolic "
    "link\"\n"
    "    r=${r%\"${nl}x\"}\n"
    "    inside \"$r\" || die 77 \"$rel: security error: a symbolic link leads outside the "
    "workspace\"\n"
    "    t=$r\n"
    "  elif [ \"$op\" = write ] || [ \"$op\" = stage ]; then\n"
    "    die 77 \"$rel: is a symbolic link to a missing file; refusing to write through it\"\n"
    "  else die 66 \"$rel: no such file or directory\"\n"
    "  fi\n"
    "fi\n"
    "case $op in\n"
    "stat|read)\n"
    "  [ -e \"$t\" ] || die 66 \"$rel: no such file or directory\"\n"
    "  [ -d \"$t\" ] && die 85 \"$rel: is a directory\"\n"
    "  [ -f \"$t\" ] || die 86 \"$rel: not a regular file\"\n"
    "  m=$(stat -c %a -- \"$t\") || die 69 \"$rel: cannot stat\"\n"
    "  if [ \"$op\" = stat ]; then echo \"$m\"; exit 0; fi\n"
    "  s=$(wc -c < \"$t\") || die 69 \"$rel: cannot read\"\n"
    "  s=$((s + 0))\n"
    "  [ \"$s\" -le \"$arg\" ] || die 91 \"$rel: file too large ($s bytes, at most $arg)\"\n"
    "  if command -v base64 >/dev/null 2>&1; then\n"
    "    printf '%s b64 %s\\n' \"$m\" \"$s\"; exec base64 < \"$t\"\n"
    "  fi\n"
    "  printf '%s hex %s\\n' \"$m\" \"$s\"; exec od -An -v -tx1 < \"$t\";;\n"
    "write)\n"
    "  [ -d \"$t\" ] && die 85 \"$rel: is a directory\"\n"
    "  m=$arg\n"
    "  if [ \"$m\" = keep ]; then\n"
    "    if [ -f \"$t\" ]; then m=$(stat -c %a -- \"$t\") || die 69 \"$rel: cannot stat\"; "
    "else m=644; fi\n"
    "  fi\n"
    "  d=${t%/*}; [ -n \"$d\" ] || d=/\n"
    "  i=0\n"
    "  while :; do\n"
    "    tmp=$d/.cae-tmp-$$-$i\n"
    "    (set -C; : > \"$tmp\") 2>/dev/null && break\n"
    "    i=$((i + 1)); [ $i -lt 100 ] || die 69 \"$rel: cannot create a temporary file\"\n"
    "  done\n"
    "  cat > \"$tmp\" || { rm -f -- \"$tmp\"; die 69 \"$rel: cannot write\"; }\n"
    "  s=$(wc -c < \"$tmp\"); s=$((s + 0))\n"
    "  [ \"$s\" -eq \"$want\" ] || { rm -f -- \"$tmp\"; die 69 \"$rel: short write ($s of "
    "$want bytes)\"; }\n"
    "  chmod \"$m\" \"$tmp\" && mv -f -- \"$tmp\" \"$t\" || { rm -f -- \"$tmp\"; die 69 "
    "\"$rel: cannot replace the file\"; }\n"
    "  ;;\n"
    "stage)\n"
    "  [ -d \"$t\" ] && die 85 \"$rel: is a directory\"\n"
    "  case $t in *\"$nl\"*) die 86 \"$rel: a path with a newline cannot be staged\";; esac\n"
    "  m=$arg\n"
    "  if [ \"$m\" = keep ]; then\n"
    "    if [ -f \"$t\" ]; then m=$(stat -c %a -- \"$t\") || die 69 \"$rel: cannot stat\"; "
    "else m=644; fi\n"
    "  fi\n"
    "  d=${t%/*}; [ -n \"$d\" ] || d=/\n"
    "  tmp=$d/.cae-tmp-$tok-$idx\n"
    "  p=${root%/*}; [ -n \"$p\" ] || p=/\n"
    "  J=$root/.cae-journal; [ \"$p\" != / ] && [ -w \"$p\" ] && J=$p/.cae-journal\n"
    "  mkdir -p -- \"$J\" 2>/dev/null\n"
    "  printf 'S\\n%s\\n%s\\n' \"$tmp\" \"$t\" >> \"$J/$tok.journal\" || "
    "die 69 \"$rel: cannot write the journal in $J\"\n"
    "  (set -C; : > \"$tmp\") 2>/dev/null || die 69 \"$rel: cannot create a staged file\"\n"
    "  cat > \"$tmp\" || die 69 \"$rel: cannot write\"\n"
    "  s=$(wc -c < \"$tmp\"); s=$((s + 0))\n"
    "  [ \"$s\" -eq \"$want\" ] || die 69 \"$rel: short write ($s of $want bytes)\"\n"
    "  chmod \"$m\" \"$tmp\" || die 69 \"$rel: cannot set the mode\"\n"
    "  printf '%s\\n' \"$t\"\n"
    "  ;;\n"
    "remove|unstage)\n"
    "  [ -L \"$t\" ] || [ -e \"$t\" ] || die 66 \"$rel: no such file or directory\"\n"
    "  [ ! -L \"$t\" ] && [ -d \"$t\" ] && die 85 \"$rel: is a directory\"\n"
    "  if [ \"$op\" = unstage ]; then\n"
    "    case $t in *\"$nl\"*) die 86 \"$rel: a path with a newline cannot be staged\";; esac\n"
    "    printf '%s\\n' \"$t\"; exit 0\n"
    "  fi\n"
    "  rm -f -- \"$t\" || die 69 \"$rel: cannot remove\"\n"
    "  ;;\n"
    "*) die 86 \"unknown operation $op\";;\n"
    "esac\n"
    "exit 0\n";

/* $1 op (list|commit|recover), $2 workspace, $3 token (commit, recover). commit reads the
 * final changes on stdin ("S", staged, target or "X", "-", target, one per line). Only paths
 * in the workspace and staged names .cae-tmp-* are acted on. */
static const char txn_script[] =
    "set -fu\n"
    "op=$1 root=$2 tok=${3:-}\n"
    "root=$(cd -P -- \"$root\" 2>/dev/null && pwd -P) || { echo \"the workspace $2 does not "
    "exist\" >&2; exit 66; }\n"
    "p=${root%/*}; [ -n \"$p\" ] || p=/\n"
    "J=$root/.cae-journal; [ \"$p\" != / ] && [ -w \"$p\" ] && J=$p/.cae-journal\n"
    "in_ws() { case $1 in \"$root\"/*) return 0;; esac; return 1; }\n"
    "apply() {\n"
    "  bad=0\n"
    "  while IFS= read -r tag && IFS= read -r a && IFS= read -r b; do\n"
    "    in_ws \"$b\" || continue\n"
    "    case $tag in\n"
    "    S) case ${a##*/} in .cae-tmp-*) ;; *) continue;; esac\n"
    "       in_ws \"$a\" || continue\n"
    "       if [ -e \"$a\" ]; then mv -f -- \"$a\" \"$b\" || bad=1; fi;;\n"
    "    X) rm -f -- \"$b\" || bad=1;;\n"
    "    esac\n"
    "  done < \"$1\"\n"
    "  return $bad\n"
    "}\n"
    "drop_staged() {\n"
    "  [ -f \"$1\" ] || return 0\n"
    "  while IFS= read -r tag && IFS= read -r a && IFS= read -r b; do\n"
    "    case ${a##*/} in .cae-tmp-*) in_ws \"$a\" && rm -f -- \"$a\";; esac\n"
    "  done < \"$1\"\n"
    "}\n"
    "j=$J/$tok.journal\n"
    "case $op in\n"
    "list)\n"
    "  set +f\n"
    "  for f in \"$J\"/*.journal; do [ -f \"$f\" ] || continue; f=${f##*/}; "
    "printf '%s\\n' \"${f%.journal}\"; done;;\n"
    "commit)\n"
    "  mkdir -p -- \"$J\" 2>/dev/null\n"
    "  cat > \"$j.c\" || { echo 'cannot write the commit record' >&2; exit 69; }\n"
    "  sync 2>/dev/null || :\n"
    "  mv -f -- \"$j.c\" \"$j.commit\" || { echo 'cannot write the commit record' >&2; exit 69; }\n"
    "  if ! apply \"$j.commit\"; then echo 'some files could not be replaced' >&2; exit 69; fi\n"
    "  drop_staged \"$j\"; rm -f -- \"$j\" \"$j.commit\"; rmdir -- \"$J\" 2>/dev/null;;\n"
    "recover)\n"
    "  if [ -f \"$j.commit\" ]; then apply \"$j.commit\" || exit 69; fi\n"
    "  drop_staged \"$j\"; rm -f -- \"$j\" \"$j.c\" \"$j.commit\"; rmdir -- \"$J\" 2>/dev/null;;\n"
    "esac\n"
    "exit 0\n";

typedef struct env_change {
	char *target; /* canonical, in the environment */
	char *staged; /* NULL: removed */
} env_change;

typedef struct env_fs {
	wk_fs base;
	wk_exec_ctx ctx;
	char *root;
	/* the open transaction */
	bool txn;
	char token[64];
	unsigned staged;
	env_change *changes;
	size_t nchanges;
} env_fs;

static atomic_uint txn_seq;

static env_fs *env_of(wk_fs *fs)
{
	return (env_fs *)fs;
}

int cae__wk_run(const wk_exec_ctx *ctx, bool host, const char *cwd, const char *const *argv,
		const char *stdin_data, size_t stdin_len, bool has_stdin, size_t max_out,
		cae_run_result *res, cae_error *err)
{
	if (host) {
		cae_run_spec spec = {
		    .argv = argv,
		    .cwd = cwd,
		    .stdin_data = stdin_data,
		    .stdin_len = stdin_len,
		    .has_stdin = has_stdin,
		    .timeout_ms = ctx->timeout_ms,
		    .max_stdout = max_out,
		    .max_stderr = max_out,
		    .cancel_fd = ctx->cancel_fd,
		};
		return cae_runner_run(&spec, res, err);
	}
	static const char *const env[] = {"LC_ALL=C", NULL};
	cae_exec_request req = {
	    .argv = argv,
	    .cwd = cwd,
	    .extra_env = env,
	    .stdin_data = stdin_data,
	    .stdin_len = stdin_len,
	    .has_stdin = has_stdin,
	    .timeout_ms = ctx->timeout_ms,
	    .max_stdout = max_out,
	    .max_stderr = max_out,
	    .cancel_fd = ctx->cancel_fd,
	};
	return cae_backend_exec(ctx->backend, ctx->task_uuid, &req, res, err);
}

/* Runs the script; returns 0 with res filled when it exited 0, else -errno with err set.
 * tok/idx: the transaction's token and the staged version's index (stage), else NULL. */
static int run_script_tx(env_fs *e, const char *script, const char *op, const char *rel,
			 const char *arg, const char *data, size_t len, size_t max_out,
			 const char *tok, const char *idx, cae_run_result *res, cae_error *err)
{
	char want[32];
	snprintf(want, sizeof(want), "%zu", len);
	const char *fs_argv[] = {"sh", "-c", script, "cae-worker-fs", op, e->root, rel, arg, want,
				 tok,  idx,  NULL};
	const char *tx_argv[] = {"sh", "-c", script, "cae-worker-txn", op, e->root, tok, NULL};
	const char *const *argv = script == txn_script ? tx_argv : fs_argv;
	int r =
	    cae__wk_run(&e->ctx, false, e->root, argv, data, len, data != NULL, max_out, res, err);
	if (r < 0) {
		cae_error_prefix(err, "%s", rel);
		return r;
	}
	if (res->timed_out || res->cancelled) {
		r = cae_error_set(err, res->cancelled ? -ECANCELED : -ETIMEDOUT, "%s: %s %s", rel,
				  op, res->cancelled ? "cancelled" : "timed out");
		cae_run_result_clear(res);
		return r;
	}
	if (res->exit_code == 0)
		return 0;
	switch (res->exit_code) {
	case X_ENOENT:
		r = -ENOENT;
		break;
	case X_EACCES:
		r = -EACCES;
		break;
	case X_ENOTDIR:
		r = -ENOTDIR;
		break;
	case X_EISDIR:
		r = -EISDIR;
		break;
	case X_EINVAL:
		r = -EINVAL;
		break;
	case X_EFBIG:
		r = -EFBIG;
		break;
	default:
		r = -EIO;
	}
	/* the script's message, one line */
	char *m = res->err;
	size_t n = res->err_len;
	while (n && (m[n - 1] == '\n' || m[n - 1] == '\r'))
		n--;
	if (n)
		cae_error_set(err, r, "%.*s", (int)(n > 900 ? 900 : n), m);
	else
		cae_error_set(err, r, "%s: %s failed (exit status %d)", rel, op, res->exit_code);
	cae_run_result_clear(res);
	return r;
}

static int run_script(env_fs *e, const char *op, const char *rel, const char *arg, const char *data,
		      size_t len, size_t max_out, cae_run_result *res, cae_error *err)
{
	return run_script_tx(e, fs_script, op, rel, arg, data, len, max_out, NULL, NULL, res, err);
}

static int b64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/* Decodes s[0..n) (whitespace ignored) into a new buffer of want bytes. */
static int decode(const char *s, size_t n, bool hex, size_t want, char **out)
{
	char *buf = malloc(want + 1);
	if (!buf)
		return -ENOMEM;
	size_t o = 0;
	unsigned acc = 0;
	int bits = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
			continue;
		if (!hex && c == '=')
			break;
		int v = hex ? cae__hex_digit((unsigned char)c) : b64_value(c);
		if (v < 0)
			goto bad;
		acc = (acc << (hex ? 4 : 6)) | (unsigned)v;
		bits += hex ? 4 : 6;
		if (bits >= 8) {
			bits -= 8;
			if (o == want)
				goto bad;
			buf[o++] = (char)((acc >> bits) & 0xff);
		}
	}
	if (o != want)
		goto bad;
	buf[o] = '\0';
	*out = buf;
	return 0;
bad:
	free(buf);
	return -EIO;
}

static int env_read(wk_fs *fs, const char *rel, size_t max, char **data, size_t *len, mode_t *mode,
		    cae_error *err)
{
	env_fs *e = env_of(fs);
	if (data)
		*data = NULL;
	char arg[32];
	snprintf(arg, sizeof(arg), "%zu", max);
	/* base64: 4 bytes per 3, a newline per 76 */
	size_t cap = data ? max / 3 * 4 + max / 50 + 4096 : 4096;
	cae_run_result res;
	int r = run_script(e, data ? "read" : "stat", rel, arg, NULL, 0, cap, &res, err);
	if (r < 0)
		return r;
	unsigned m = 0;
	char enc[8] = "";
	unsigned long long size = 0;
	int fields =
	    data ? sscanf(res.out, "%o %7s %llu", &m, enc, &size) : sscanf(res.out, "%o", &m);
	if (fields != (data ? 3 : 1) || res.out_truncated) {
		cae_run_result_clear(&res);
		return cae_error_set(err, -EIO, "%s: unexpected answer from the environment", rel);
	}
	if (mode)
		*mode = (mode_t)(m & 07777);
	if (!data) {
		cae_run_result_clear(&res);
		return 0;
	}
	const char *nl = strchr(res.out, '\n');
	const char *body = nl ? nl + 1 : res.out + res.out_len;
	r = decode(body, res.out_len - (size_t)(body - res.out), strcmp(enc, "hex") == 0,
		   (size_t)size, data);
	cae_run_result_clear(&res);
	if (r < 0)
		return cae_error_set(err, r, "%s: the file's content did not come back intact",
				     rel);
	*len = (size_t)size;
	return 0;
}

static int env_write(wk_fs *fs, const char *rel, const char *data, size_t len, mode_t mode,
		     cae_error *err)
{
	env_fs *e = env_of(fs);
	char arg[32];
	if (mode == WK_MODE_KEEP)
		snprintf(arg, sizeof(arg), "keep");
	else
		snprintf(arg, sizeof(arg), "%o", (unsigned)(mode & 07777));
	cae_run_result res;
	int r = run_script(e, "write", rel, arg, data ? data : "", len, 4096, &res, err);
	if (r == 0)
		cae_run_result_clear(&res);
	return r;
}

static int env_remove(wk_fs *fs, const char *rel, cae_error *err)
{
	env_fs *e = env_of(fs);
	cae_run_result res;
	int r = run_script(e, "remove", rel, "", NULL, 0, 4096, &res, err);
	if (r == 0)
		cae_run_result_clear(&res);
	return r;
}

/* ---- Transactions ---- */

static void changes_clear(env_fs *e)
{
	for (size_t i = 0; i < e->nchanges; i++) {
		free(e->changes[i].target);
		free(e->changes[i].staged);
	}
	free(e->changes);
	e->changes = NULL;
	e->nchanges = 0;
}

/* Records the change of target (the first line of out): staged (new) or a removal. */
static int change_put(env_fs *e, const char *out, size_t out_len, char *staged, cae_error *err)
{
	size_t n = 0;
	while (n < out_len && out[n] != '\n')
		n++;
	if (!n) {
		free(staged);
		return cae_error_set(err, -EIO, "unexpected answer from the environment");
	}
	for (size_t i = 0; i < e->nchanges; i++) {
		env_change *c = &e->changes[i];
		if (strlen(c->target) == n && memcmp(c->target, out, n) == 0) {
			free(c->staged); /* an earlier version: removed with the journal */
			c->staged = staged;
			return 0;
		}
	}
	env_change *nc = realloc(e->changes, (e->nchanges + 1) * sizeof(*nc));
	char *target = strndup(out, n);
	if (!nc || !target) {
		if (nc)
			e->changes = nc;
		free(target);
		free(staged);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	e->changes = nc;
	e->changes[e->nchanges++] = (env_change){target, staged};
	return 0;
}

static int txn_run(env_fs *e, const char *op, const char *tok, const char *in, size_t in_len,
		   cae_run_result *res, cae_error *err)
{
	return run_script_tx(e, txn_script, op, "", "", in, in_len, 65536, tok, NULL, res, err);
}

static int env_txn_begin(wk_fs *fs, cae_error *err)
{
	env_fs *e = env_of(fs);
	if (e->txn)
		return cae_error_set(err, -EBUSY, "a transaction is already open");
	pid_t pid = getpid();
	snprintf(e->token, sizeof(e->token), "%d-%llu.%u", (int)pid, cae__process_start_time(pid),
		 atomic_fetch_add(&txn_seq, 1));
	e->txn = true;
	e->staged = 0;
	return 0;
}

static int env_txn_write(wk_fs *fs, const char *rel, const char *data, size_t len, mode_t mode,
			 cae_error *err)
{
	env_fs *e = env_of(fs);
	if (!e->txn)
		return cae_error_set(err, -EINVAL, "no open transaction");
	char arg[32], idx[32];
	if (mode == WK_MODE_KEEP)
		snprintf(arg, sizeof(arg), "keep");
	else
		snprintf(arg, sizeof(arg), "%o", (unsigned)(mode & 07777));
	unsigned i = ++e->staged;
	snprintf(idx, sizeof(idx), "%u", i);
	cae__txn_kill_point();
	cae_run_result res;
	int r = run_script_tx(e, fs_script, "stage", rel, arg, data ? data : "", len, 8192,
			      e->token, idx, &res, err);
	if (r < 0)
		return r;
	char *staged = NULL;
	/* the staged name is the target's directory + .cae-tmp-<token>-<i> */
	const char *slash = memrchr(res.out, '/', res.out_len);
	if (slash && asprintf(&staged, "%.*s/.cae-tmp-%s-%u", (int)(slash - res.out), res.out,
			      e->token, i) < 0)
		staged = NULL;
	r = staged ? change_put(e, res.out, res.out_len, staged, err)
		   : cae_error_set(err, -EIO, "%s: unexpected answer from the environment", rel);
	cae_run_result_clear(&res);
	return r;
}

static int env_txn_remove(wk_fs *fs, const char *rel, cae_error *err)
{
	env_fs *e = env_of(fs);
	if (!e->txn)
		return cae_error_set(err, -EINVAL, "no open transaction");
	cae__txn_kill_point();
	cae_run_result res;
	int r = run_script(e, "unstage", rel, "", NULL, 0, 8192, &res, err);
	if (r < 0)
		return r;
	r = change_put(e, res.out, res.out_len, NULL, err);
	cae_run_result_clear(&res);
	return r;
}

static void env_txn_abort(wk_fs *fs)
{
	env_fs *e = env_of(fs);
	if (!e->txn)
		return;
	cae__txn_kill_point();
	cae_run_result res;
	if (e->staged && txn_run(e, "recover", e->token, NULL, 0, &res, NULL) == 0)
		cae_run_result_clear(&res);
	changes_clear(e);
	e->txn = false;
}

static int env_txn_commit(wk_fs *fs, cae_error *err)
{
	env_fs *e = env_of(fs);
	if (!e->txn)
		return cae_error_set(err, -EINVAL, "no open transaction");
	cae_buf in;
	cae__buf_init(&in, SIZE_MAX - 1);
	int r = 0;
	for (size_t i = 0; r == 0 && i < e->nchanges; i++) {
		const env_change *c = &e->changes[i];
		r = cae__buf_printf(&in, "%s\n%s\n%s\n", c->staged ? "S" : "X",
				    c->staged ? c->staged : "-", c->target);
	}
	if (r < 0) {
		cae__buf_clear(&in);
		env_txn_abort(fs);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	cae__txn_kill_point();
	cae_run_result res;
	r = txn_run(e, "commit", e->token, in.data ? in.data : "", in.len, &res, err);
	cae__buf_clear(&in);
	if (r == 0)
		cae_run_result_clear(&res);
	else
		cae_error_prefix(err, "the files could not all be replaced (those that were stay "
				      "replaced; the commit is completed by the next run once this "
				      "process is gone)");
	cae__txn_kill_point();
	changes_clear(e);
	e->txn = false;
	return r;
}

/* Completes or rolls back the transactions of cae processes that are gone. */
static void env_recover(env_fs *e)
{
	cae_run_result res;
	if (txn_run(e, "list", "", NULL, 0, &res, NULL) < 0)
		return;
	for (char *line = res.out; line && *line;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		bool owned;
		if (cae__scratch_owner_dead(line, "", &owned) && owned) {
			cae_run_result rr;
			if (txn_run(e, "recover", line, NULL, 0, &rr, NULL) == 0)
				cae_run_result_clear(&rr);
		}
		line = nl ? nl + 1 : NULL;
	}
	cae_run_result_clear(&res);
}

static void env_free(wk_fs *fs)
{
	env_fs *e = env_of(fs);
	env_txn_abort(fs);
	free(e->root);
	free(e);
}

static const wk_fs_ops env_ops = {
    .read = env_read,
    .write = env_write,
    .remove = env_remove,
    .txn_begin = env_txn_begin,
    .txn_write = env_txn_write,
    .txn_remove = env_txn_remove,
    .txn_commit = env_txn_commit,
    .txn_abort = env_txn_abort,
    .free = env_free,
};

int cae__wk_fs_env_new(const wk_exec_ctx *ctx, const char *root, wk_fs **out, cae_error *err)
{
	env_fs *e = calloc(1, sizeof(*e));
	if (!e)
		return cae_error_set(err, -ENOMEM, "out of memory");
	e->base.ops = &env_ops;
	e->ctx = *ctx;
	e->root = strdup(root);
	if (!e->root) {
		free(e);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	env_recover(e);
	*out = &e->base;
	return 0;
}
