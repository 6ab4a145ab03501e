/* The process runner: one call runs one command to completion and returns its exit status,
 * its two output streams (bounded, valid UTF-8) and its duration. Shared by both command
 * tools, git operations, the patch worker and (later) the in-container helper.
 *
 * Guarantees of cae_runner_run():
 * - the command runs in its own process group, stdin from a string or /dev/null, every other
 *   fd closed (all of ours are O_CLOEXEC), signal mask and dispositions reset;
 * - stdout and stderr are drained concurrently (poll) with a cap per stream and no
 *   back-pressure: bytes past the cap are read and dropped, memory stays bounded;
 * - on timeout or cancellation: SIGTERM to the whole process tree, a grace period, SIGKILL to
 *   everything left, then a drain of the pipes bounded in time;
 * - after every call, timeout or not, no zombie and no orphan remains: the calling process is
 *   made a child subreaper (prctl) the first time the runner is used, so that a grandchild
 *   that calls setsid() or double-forks is re-parented to us, found and killed.
 * Threads may run commands concurrently. A process that is not a child of a running call
 * and is re-parented to this process is killed at the end of the next call.
 */
#ifndef CAE_RUNNER_H
#define CAE_RUNNER_H

#include "cae/export.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cae/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cae_truncate_mode {
	CAE_TRUNCATE_HEAD = 0,	/* keep the first max bytes */
	CAE_TRUNCATE_HEAD_TAIL, /* keep the first and the last max/2 bytes, with a marker */
} cae_truncate_mode;

/* A command's input and output while it runs (process sessions, live output): optional
 * beside the result, which is the same with or without it. */
typedef struct cae_live_io {
	/* Called with each piece of output as it arrives (stream 1: stdout, 2: stderr), before
	 * any cap applies, on the thread running the command; may be NULL. Must not block for
	 * long. */
	void (*output)(void *ud, int stream, const char *data, size_t len);
	void *ud;
	/* >= 0: the command's stdin is read from this descriptor (a pipe the caller writes and
	 * closes for end of input) instead of stdin_data; -1: none. */
	int stdin_fd;
	/* > 0: each byte read from this descriptor is a signal number (1 to 64) sent to the
	 * command's process group, which runs on (an interrupt, a reload); other bytes are
	 * ignored. 0 or -1: none (so that a zeroed cae_live_io has none). */
	int signal_fd;
} cae_live_io;

#define CAE_RUNNER_DEFAULT_MAX_OUTPUT (1024u * 1024u)
#define CAE_RUNNER_DEFAULT_GRACE_MS 2000
#define CAE_RUNNER_DEFAULT_DRAIN_MS 500

typedef struct cae_run_spec {
	const char *const
	    *argv; /* borrowed, >= 1 element; argv[0] without '/' is searched in PATH */
	const char *const *envp; /* borrowed; NULL inherits the caller's environment */
	const char *cwd;	 /* NULL: the caller's working directory */
	const char *stdin_data;	 /* borrowed; used when has_stdin */
	size_t stdin_len;
	bool has_stdin;	    /* false: stdin is /dev/null */
	int64_t timeout_ms; /* <= 0: no timeout */
	int64_t grace_ms;   /* SIGTERM → SIGKILL delay; 0: default */
	int64_t drain_ms;   /* bound on reading after the kill; 0: default */
	size_t max_stdout;  /* bytes kept per stream; 0: default (1 MiB) */
	size_t max_stderr;
	cae_truncate_mode truncate;
	int cancel_fd;		 /* readable = cancel the command; -1: none (0 is fd 0: set -1) */
	const cae_live_io *live; /* borrowed; NULL: none */
} cae_run_spec;

typedef struct cae_run_result {
	int exit_code;	 /* the exit status, or 128 + signal when a signal ended it */
	int term_signal; /* the signal that ended it, 0 when it exited */
	bool timed_out;
	bool cancelled;
	char *out; /* owned, NUL-terminated, valid UTF-8 (invalid bytes become U+FFFD) */
	size_t out_len;
	bool out_truncated;
	uint64_t out_total; /* bytes the command wrote, kept or not */
	char *err;
	size_t err_len;
	bool err_truncated;
	uint64_t err_total;
	int64_t duration_us; /* monotonic clock, spawn to reaped */
	int64_t duration_ms;
	char *warning; /* owned, NULL: none; how the command ran when that is worth saying
			* (e.g. a container's helper was gone and a plain exec was used) */
	/* owned, NULL: none; connections the environment's network proxy refused since the
	 * previous command, a JSON array [{host, port, count}] as text (cae/net.h) */
	char *network_denied;
} cae_run_result;

/* Runs spec to completion. Returns 0 when the command ran (whatever its exit status), or
 * -ENOENT when argv[0] cannot be found or executed as a program ("command not found"),
 * -ENOTDIR when cwd is not a directory, -EINVAL for a bad spec, other -errno for system
 * failures; err names the cause. On failure *res holds nothing to free. */
CAE_EXPORT int cae_runner_run(const cae_run_spec *spec, cae_run_result *res, cae_error *err);

/* Frees the result's strings and zeroes it. Accepts a zeroed result. */
CAE_EXPORT void cae_run_result_clear(cae_run_result *res);

/* Resolves a program name as execvp would (PATH from envp or the environment; a name with a
 * '/' is taken as is). *out is a new string. Returns 0, or -ENOENT / -EACCES. */
CAE_EXPORT int cae_runner_find_program(const char *name, const char *const *envp, char **out);

/* Long-lived children (services, such as cae-helper): started like a command (own process
 * group, signal mask and dispositions reset, every other fd closed) with stdin = stdin_fd,
 * stdout on /dev/null and stderr inherited, and registered so that the orphan sweep at the end
 * of every cae_runner_run() leaves them alone. Not waited for: stop them with
 * cae_runner_service_stop(). Returns 0 and *pid, or -errno (err names the cause). */
CAE_EXPORT int cae_runner_service_start(const char *const *argv, const char *const *envp,
					int stdin_fd, pid_t *pid, cae_error *err);
/* Waits up to grace_ms for the service to exit, then kills its whole tree; reaps it and
 * forgets it, then kills what it left behind (re-parented to us). Returns its wait status. */
CAE_EXPORT int cae_runner_service_stop(pid_t pid, int64_t grace_ms);

#ifdef __cplusplus
}
#endif
#endif
