/* The multiplexed exec stream, the exec wrapper's header line, and the two in-container
 * scripts (see include/cae/docker.h, cae_docker_exec). */
#include "docker/docker-internal.h"

#include "base/macro.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

/* ---- demultiplexer ---- */

void cae__docker_demux_init(cae_docker_demux *dm)
{
	memset(dm, 0, sizeof(*dm));
}

bool cae__docker_demux_idle(const cae_docker_demux *dm)
{
	return dm->hdr_len == 0 && dm->left == 0;
}

int cae__docker_demux_feed(cae_docker_demux *dm, const char *p, size_t n, cae_docker_demux_fn fn,
			   void *ud)
{
	while (n > 0) {
		if (dm->left == 0) {
			size_t take = MIN(n, sizeof(dm->hdr) - dm->hdr_len);
			memcpy(dm->hdr + dm->hdr_len, p, take);
			dm->hdr_len += take;
			p += take;
			n -= take;
			if (dm->hdr_len < sizeof(dm->hdr))
				return 0;
			dm->hdr_len = 0;
			if (dm->hdr[0] > 2 || dm->hdr[1] || dm->hdr[2] || dm->hdr[3])
				return -EPROTO;
			dm->stream = dm->hdr[0];
			dm->left = (uint32_t)dm->hdr[4] << 24 | (uint32_t)dm->hdr[5] << 16 |
				   (uint32_t)dm->hdr[6] << 8 | (uint32_t)dm->hdr[7];
			continue;
		}
		size_t take = MIN(n, (size_t)dm->left);
		int r = fn(ud, dm->stream, p, take);
		if (r < 0)
			return r;
		dm->left -= (uint32_t)take;
		p += take;
		n -= take;
	}
	return 0;
}

/* ---- the wrapper's header line ---- */

static const char header_prefix[] = "cae-exec ";

static bool parse_int(const char **pp, int *out)
{
	const char *p = *pp;
	long v = 0;
	if (*p < '0' || *p > '9')
		return false;
	while (*p >= '0' && *p <= '9') {
		v = v * 10 + (*p - '0');
		if (v > 0x7fffffff)
			return false;
		p++;
	}
	*out = (int)v;
	*pp = p;
	return true;
}

static void parse_header(cae_docker_wrap_header *h)
{
	/* "cae-exec PID PGID STATUS" (without the newline); PGID may be empty. */
	const char *p = h->buf + sizeof(header_prefix) - 1;
	h->status = CAE_WRAP_NONE;
	if (!parse_int(&p, &h->pid) || *p++ != ' ')
		return;
	if (!parse_int(&p, &h->pgid))
		h->pgid = 0;
	if (*p++ != ' ')
		return;
	if (strcmp(p, "ok") == 0)
		h->status = CAE_WRAP_OK;
	else if (strcmp(p, "nocwd") == 0)
		h->status = CAE_WRAP_NOCWD;
	else if (strcmp(p, "outside") == 0)
		h->status = CAE_WRAP_OUTSIDE;
	else if (strcmp(p, "notfound") == 0)
		h->status = CAE_WRAP_NOTFOUND;
}

size_t cae__docker_wrap_header_feed(cae_docker_wrap_header *h, const char *p, size_t n,
				    const char **replay, size_t *replay_len)
{
	*replay = NULL;
	*replay_len = 0;
	if (h->done)
		return 0;
	size_t used = 0;
	while (used < n) {
		char c = p[used];
		size_t plen = sizeof(header_prefix) - 1;
		bool prefix_ok = h->len >= plen || c == header_prefix[h->len];
		if (!prefix_ok || h->len + 1 >= sizeof(h->buf)) {
			/* Not our header: what was held back belongs to the command. */
			h->done = true;
			*replay = h->buf;
			*replay_len = h->len;
			return used;
		}
		used++;
		if (c == '\n') {
			h->buf[h->len] = '\0';
			parse_header(h);
			if (h->status == CAE_WRAP_NONE) {
				/* A line that looked like ours but is not: give it back. */
				h->buf[h->len++] = '\n';
				h->done = true;
				*replay = h->buf;
				*replay_len = h->len;
				return used;
			}
			h->done = true;
			h->len = 0;
			return used;
		}
		h->buf[h->len++] = c;
	}
	return used;
}

/* ---- scripts ----
 * Wrapper: sh -c WRAPPER cae-exec CWD CONFINE ARGV...
 * Reads its own process group from /proc (builtins only), changes directory with -P so that
 * PWD is the real path, checks confinement and that argv[0] is a program (PATH search like
 * execvp; a builtin of the shell does not count), reports, runs the command (catching
 * SIGTERM meanwhile, so that the status is the command's own, as the local runner reports
 * it; a caught signal is reset to default in the command), then sends
 * SIGKILL to what the command left in its session (background jobs, whatever ignores
 * SIGTERM), as the local runner does after every call, provided the wrapper leads its group
 * (runc makes every exec a session and group leader; the check keeps us from signalling
 * someone else's processes in a runtime that does not). */
const char cae__docker_wrapper_script[] =
    "p=; r=; read -r r </proc/$$/stat; r=${r##*) }; g() { p=$3; }; g $r\n"
    "if ! cd -P \"$1\" 2>/dev/null; then printf 'cae-exec %s %s nocwd\\n' $$ \"$p\" >&2; "
    "exit 126; fi\n"
    "case \"$2\" in \"\") ;; *) case $PWD/ in \"$2\"/*) ;; *) "
    "printf 'cae-exec %s %s outside\\n' $$ \"$p\" >&2; exit 126;; esac;; esac\n"
    "shift 2\n"
    "f=; case $1 in */*) [ -f \"$1\" ] && [ -x \"$1\" ] && f=1;; *) set -f; o=$IFS; IFS=:; "
    "for d in $PATH; do [ -f \"${d:-.}/$1\" ] && [ -x \"${d:-.}/$1\" ] && { f=1; break; }; "
    "done; IFS=$o; set +f;; esac\n"
    "if [ -z \"$f\" ]; then printf 'cae-exec %s %s notfound\\n' $$ \"$p\" >&2; exit 127; fi\n"
    "printf 'cae-exec %s %s ok\\n' $$ \"$p\" >&2\n"
    "trap : TERM\n"
    "\"$@\"\n"
    "c=$?\n"
    "if [ \"$p\" = $$ ]; then s=; l=; h() { s=$4; }; for d in /proc/[0-9]*; do "
    "[ \"${d#/proc/}\" = $$ ] && continue; read -r l 2>/dev/null <\"$d/stat\" || continue; "
    "l=${l##*) }; h $l; [ \"$s\" = $$ ] && kill -KILL \"${d#/proc/}\" 2>/dev/null; done; fi\n"
    "exit $c\n";

/* Kill: sh -c KILL cae-kill SIGNAL SID
 * Signals the process group SID and every process whose session is SID (a process that
 * changed its group stays in the session). Shell builtins only: no fork is needed once the
 * shell runs, which matters when a fork bomb holds every pid the container may have. */
const char cae__docker_kill_script[] =
    "t=$2; s=; l=; g() { s=$4; }\n"
    "kill -$1 -$t 2>/dev/null; kill -$1 $t 2>/dev/null\n"
    "for d in /proc/[0-9]*; do read -r l 2>/dev/null <\"$d/stat\" || continue; l=${l##*) }; "
    "g $l; [ \"$s\" = \"$t\" ] && kill -$1 \"${d#/proc/}\" 2>/dev/null; done\n"
    "exit 0\n";
