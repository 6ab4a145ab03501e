/* The Docker Engine API client: HTTP over DOCKER_HOST with libcurl, no docker CLI.
 *
 * DOCKER_HOST forms: unix:///path/to.sock (default unix:///var/run/docker.sock), a bare
 * absolute socket path, tcp://host[:port] or http://host[:port] (plain HTTP, port 2375 by
 * default). TLS (DOCKER_TLS_VERIFY) and ssh:// are not supported and are refused.
 *
 * Version: on first use the client asks GET /_ping (unversioned) and speaks
 * min(the engine's API-Version, CAE_DOCKER_API_MAX) as a /v1.xx path prefix on every later
 * request (GET /version when the header is missing). An engine older than CAE_DOCKER_API_MIN
 * is refused. Podman's Docker-compatible API answers the same way.
 *
 * Every call has a timeout (CAE_DOCKER_DEFAULT_TIMEOUT_MS unless changed); exec streams use
 * the command's own timeout instead. Idempotent calls (GET, DELETE) are retried twice on a
 * transport failure or timeout (retry, then error). Errors carry the
 * engine's own message ("No such image: x:latest") after the method and path, and map HTTP
 * statuses to errno values:
 *   400 -EINVAL, 401/403 -EACCES, 404 -ENOENT, 409 -EEXIST (conflict), 500 -EIO,
 *   501 -ENOSYS, 503 -EAGAIN; transport: -ECONNREFUSED (engine unreachable), -ETIMEDOUT.
 *
 * Responses are bounded (CAE_DOCKER_MAX_RESPONSE); exec output goes through the same bounded
 * capture as the local runner (runner/capture.h), so both backends truncate alike.
 *
 * A client may be used from several threads at once (connections are pooled). It never
 * prints or logs. Ownership: JSON values returned through out-parameters are new references;
 * JSON arguments are borrowed; strings returned through char ** are new.
 */
#ifndef CAE_DOCKER_H
#define CAE_DOCKER_H

#include "cae/export.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cae/error.h"
#include "cae/runner.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CAE_DOCKER_DEFAULT_HOST "unix:///var/run/docker.sock"
#define CAE_DOCKER_DEFAULT_TIMEOUT_MS 60000
#define CAE_DOCKER_API_MIN "1.24"
#define CAE_DOCKER_API_MAX "1.47"
#define CAE_DOCKER_MAX_RESPONSE (32u * 1024u * 1024u)

typedef struct cae_docker cae_docker;

/* A client for host (NULL or "": CAE_DOCKER_DEFAULT_HOST). Does not connect yet.
 * -EINVAL for a host form that is not supported. */
CAE_EXPORT int cae_docker_new(const char *host, cae_docker **out, cae_error *err);
CAE_EXPORT void cae_docker_free(cae_docker *d); /* accepts NULL */

/* Timeout of each later call, in ms (<= 0: the default). */
CAE_EXPORT void cae_docker_set_timeout(cae_docker *d, int64_t timeout_ms);
/* The host as given (normalised), e.g. "unix:///var/run/docker.sock". Borrowed. */
CAE_EXPORT const char *cae_docker_host(const cae_docker *d);

/* GET /_ping with its own timeout (<= 0: the call timeout), no retry; negotiates the API
 * version when not done yet. 0 when the engine answers. */
CAE_EXPORT int cae_docker_ping(cae_docker *d, int64_t timeout_ms, cae_error *err);
/* The negotiated version ("1.41"), negotiating first if needed; NULL when the engine does
 * not answer (err set). Borrowed, valid for the client's life. */
CAE_EXPORT const char *cae_docker_api_version(cae_docker *d, cae_error *err);

/* One API call: method ("GET", "POST", "DELETE", ...), path below the version prefix
 * ("/containers/json?all=1"), optional JSON body (borrowed). On a 2xx or 304 answer returns
 * the HTTP status and, when resp is not NULL, the parsed JSON body (*resp NULL for an empty
 * or non-JSON body). Otherwise -errno as mapped above, err = "METHOD PATH: message". */
CAE_EXPORT int cae_docker_call(cae_docker *d, const char *method, const char *path, json_t *body,
			       json_t **resp, cae_error *err);

/* ---- containers (id may be a name or an id) ---- */

/* POST /containers/create?name=NAME with config (borrowed). *id is new; *warnings (may be
 * NULL) receives the engine's warnings array. */
CAE_EXPORT int cae_docker_container_create(cae_docker *d, const char *name, json_t *config,
					   char **id, json_t **warnings, cae_error *err);
CAE_EXPORT int cae_docker_container_start(cae_docker *d, const char *id, cae_error *err);
/* GET /containers/{id}/json; -ENOENT when there is no such container. */
CAE_EXPORT int cae_docker_container_inspect(cae_docker *d, const char *id, json_t **out,
					    cae_error *err);
/* GET /containers/{id}/stats?stream=false&one-shot=true: one sample of the container's
 * resource use (cpu_stats, memory_stats, pids_stats; precpu_stats is empty with one-shot
 * on engines that know it). -ENOENT when there is no such container. */
CAE_EXPORT int cae_docker_container_stats(cae_docker *d, const char *id, json_t **out,
					  cae_error *err);
/* The figures an operator reads from a stats sample (above) and the container's inspect
 * (may be NULL: no CPU limit then): {cpu_seconds, cpu_percent?, memory_bytes,
 * memory_limit_bytes, pids, pids_limit?, cpus_limit?}. Memory in use excludes the page cache
 * the kernel may drop (inactive files), as `docker stats` shows it. New reference. */
CAE_EXPORT json_t *cae_docker_stats_summary(json_t *stats, json_t *inspect);
/* POST /containers/{id}/stop?t=timeout_s (an already stopped container is success). */
CAE_EXPORT int cae_docker_container_stop(cae_docker *d, const char *id, int timeout_s,
					 cae_error *err);
/* POST /containers/{id}/kill?signal=SIG (signal NULL: KILL). */
CAE_EXPORT int cae_docker_container_kill(cae_docker *d, const char *id, const char *signal,
					 cae_error *err);
/* POST /containers/{id}/restart?t=timeout_s */
CAE_EXPORT int cae_docker_container_restart(cae_docker *d, const char *id, int timeout_s,
					    cae_error *err);
/* POST /containers/{id}/rename?name=NAME; -EEXIST (409) when the name is taken. */
CAE_EXPORT int cae_docker_container_rename(cae_docker *d, const char *id, const char *name,
					   cae_error *err);
/* DELETE /containers/{id}?force=&v= ; -ENOENT when there is no such container. */
CAE_EXPORT int cae_docker_container_remove(cae_docker *d, const char *id, bool force, bool volumes,
					   cae_error *err);
/* GET /containers/json?all=&filters= with filters (borrowed, may be NULL) such as
 * {"name": ["coding-agent-exec-"], "label": ["cae.task_uuid"]}. *out: array. */
CAE_EXPORT int cae_docker_container_list(cae_docker *d, bool all, json_t *filters, json_t **out,
					 cae_error *err);
/* PUT /containers/{id}/archive?path=PATH: extracts the tar read from fd (until EOF, size
 * bytes; the fd is borrowed and read from its current offset) into the directory PATH of
 * the container, which must exist. The call timeout applies to the whole upload. */
CAE_EXPORT int cae_docker_put_archive(cae_docker *d, const char *id, const char *path, int fd,
				      uint64_t size, cae_error *err);
/* GET /containers/{id}/archive?path=PATH: the engine's tar of PATH in the container (the
 * directory or file itself, by its name, and what is beneath it) written to fd (borrowed),
 * at most max bytes (-EFBIG beyond); *size (may be NULL) its length. -ENOENT when PATH is
 * not there. The call timeout applies to the whole download. */
CAE_EXPORT int cae_docker_get_archive(cae_docker *d, const char *id, const char *path, int fd,
				      uint64_t max, uint64_t *size, cae_error *err);
/* GET /info */
CAE_EXPORT int cae_docker_info(cae_docker *d, json_t **out, cae_error *err);

/* ---- exec ---- */

/* One command in a running container, with the runner's semantics (include/cae/runner.h):
 * stdout and stderr demultiplexed into two bounded captures (same caps, truncation modes and
 * UTF-8 cleaning as the local runner), stdin from stdin_data or none, a timeout and a
 * cancel fd. On timeout or cancellation the whole process tree of the command is killed
 * *inside the container*: SIGTERM to the command's session, a grace period, SIGKILL, each
 * delivered by a second exec (Docker does not kill an exec's processes by itself). If that
 * exec cannot run (e.g. the pids limit is exhausted by a fork bomb) and allow_restart is
 * set, the container is killed and started again: every process in it ends, files stay.
 *
 * Unless raw is set, argv runs under a small POSIX sh wrapper (the image needs /bin/sh):
 * it changes to cwd (failure: -ENOTDIR; with confine, a cwd whose real path is outside
 * confine: -ENOTDIR too), checks that argv[0] is a program (PATH search, as execvp: else
 * -ENOENT), reports its process id on a first stderr line that the client strips, runs
 * argv, then sends SIGTERM to what the command left in its process group (the runner's
 * "no orphan remains"). Exit status as the runner reports it (128 + signal for a signal
 * death). raw runs argv as is: no cwd/program checks, no tree kill (used for the kill
 * itself).
 */
typedef struct cae_docker_exec_spec {
	const char *const *argv; /* borrowed, >= 1 */
	const char *const *env;	 /* "K=V" added for this command only; may be NULL */
	const char *cwd;	 /* absolute; NULL: "/" (raw: the container's WorkingDir) */
	const char *confine;	 /* when set, cwd must resolve beneath this directory */
	const char *user;	 /* NULL: the container's user */
	const char *stdin_data;
	size_t stdin_len;
	bool has_stdin;	    /* false: stdin is /dev/null */
	int64_t timeout_ms; /* <= 0: none */
	int64_t grace_ms;   /* 0: CAE_RUNNER_DEFAULT_GRACE_MS */
	int64_t drain_ms;   /* 0: CAE_RUNNER_DEFAULT_DRAIN_MS */
	size_t max_stdout;  /* 0: CAE_RUNNER_DEFAULT_MAX_OUTPUT */
	size_t max_stderr;
	cae_truncate_mode truncate;
	int cancel_fd; /* readable = cancel the command; -1: none (0 is fd 0: set -1) */
	bool raw;
	bool allow_restart;
} cae_docker_exec_spec;

/* What happened besides the result (optional out-parameter of cae_docker_exec). */
typedef struct cae_docker_exec_info {
	char exec_id[80];
	int pid;	  /* the command's process id inside the container (0: unknown) */
	bool killed;	  /* the kill sequence ran */
	bool kill_failed; /* the kill exec could not run */
	bool restarted;	  /* ... so the container was restarted */
} cae_docker_exec_info;

/* Returns 0 when the command ran (whatever its exit status), -ESRCH when the container does
 * not exist, -EAGAIN when it is not running, -ENOENT / -ENOTDIR as above, -ECONNABORTED
 * when the container stopped or was removed during the command and -ECONNRESET when the
 * engine went away during it (rather than the exit status a killed command would show),
 * other -errno for engine or transport failures (err set). info may be NULL. */
CAE_EXPORT int cae_docker_exec(cae_docker *d, const char *container,
			       const cae_docker_exec_spec *spec, cae_run_result *res,
			       cae_docker_exec_info *info, cae_error *err);

/* After a command's stream ended unexpectedly: 0 when the container still runs, else
 * -ECONNABORTED ("the environment's container stopped during the command ...") or
 * -ECONNRESET (the engine went away), err set. Waits up to a second for the engine to
 * record a container's death. */
CAE_EXPORT int cae_docker_container_still_running(cae_docker *d, const char *container,
						  cae_error *err);

/* ---- attached exec: a long-lived byte stream to a program in a container ----
 * Starts argv (as user; NULL: the container's) with stdin and stdout attached, without the
 * exec wrapper, and keeps the connection: bytes written reach the program's stdin, bytes
 * read are its stdout (Docker's stream framing removed); its stderr is kept (the last 4 KiB)
 * for messages. One thread may read while others write. Closing (or shutting down the fd)
 * closes the program's stdin. Used for the in-container helper's channel. */
typedef struct cae_docker_stream cae_docker_stream;

CAE_EXPORT int cae_docker_attach(cae_docker *d, const char *container, const char *const *argv,
				 const char *user, int64_t timeout_ms, cae_docker_stream **out,
				 cae_error *err);
/* The connection's socket (non-blocking), for poll. */
CAE_EXPORT int cae_docker_stream_fd(const cae_docker_stream *s);
/* > 0 bytes of stdout, 0 at end of stream, -EAGAIN when none is there yet, or -errno. */
CAE_EXPORT ssize_t cae_docker_stream_read(cae_docker_stream *s, char *buf, size_t size);
/* Writes all of p (waiting as needed). 0 or -errno. */
CAE_EXPORT int cae_docker_stream_write(cae_docker_stream *s, const void *p, size_t n);
/* What the program wrote on stderr lately (NUL-terminated, borrowed). */
CAE_EXPORT const char *cae_docker_stream_stderr(const cae_docker_stream *s);
CAE_EXPORT void cae_docker_stream_close(cae_docker_stream *s); /* accepts NULL */

#ifdef __cplusplus
}
#endif
#endif
