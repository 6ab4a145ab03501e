/* cae-helper: a small long-lived process that runs commands for the manager from
 * inside an environment's confinement, with the runner's semantics (own process group,
 * caps, timeout and cancellation killing the whole tree, no orphan left). The local backend
 * starts one per environment under bubblewrap, so that a command costs a fork inside an
 * existing sandbox instead of a new set of namespaces; the docker backend will run the same
 * program as a container's PID 1.
 *
 * The channel: the helper's stdin is one end of a unix SOCK_SEQPACKET pair. The helper
 * greets with one message ("cae-helper <protocol>"); then every message the manager sends
 * carries, as SCM_RIGHTS, one end of a fresh stream socket pair on which one command is
 * served: the manager writes the request, the helper acknowledges it with one byte (end of
 * file before that byte: the command did not run) and answers with the outcome (wire format:
 * src/helper/proto.h), then closes. While the command runs, anything the manager writes on
 * (or closing) its end cancels it. Commands are independent: any number may run at once.
 * When the channel reaches end of file (the manager closed it or died) the helper kills
 * every command it runs and exits. */
#ifndef CAE_HELPER_H
#define CAE_HELPER_H

#include "cae/export.h"

#include <stdbool.h>
#include <stdint.h>

#include "cae/editor.h"
#include "cae/error.h"
#include "cae/runner.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CAE_HELPER_PROTOCOL 1

/* The exit status of `cae-helper --init` (a container's PID 1) when its lifetime ran out
 * without a manager: the container may be started again. */
#define CAE_HELPER_INIT_EXPIRED 75

/* ---- helper side ---- */

typedef struct cae_helper_serve_options {
	int64_t max_idle_ms; /* > 0: exit after this long with no command running or received */
	/* Serves a multiplexed stream on fd until it ends (cae_helper_open_mux; the cae-helper
	 * program's own, which has the file service and the editor); NULL: refused. */
	int (*serve_stream)(int fd);
} cae_helper_serve_options;

/* Serves the channel ctl_fd until end of file (returns 0) or idle expiry (returns
 * -ETIMEDOUT). Other errors: -errno. */
CAE_EXPORT int cae_helper_serve(int ctl_fd, const cae_helper_serve_options *opts);

/* ---- manager side ---- */

typedef struct cae_helper cae_helper;

/* Finds the cae-helper program: $CAE_HELPER, else beside the running executable, else the
 * installed libexec directory, else PATH. *path is new. Returns 0 or -ENOENT. */
CAE_EXPORT int cae_helper_find(char **path);
/* The same for the static build that runs in any container image (cae-helper-static;
 * $CAE_HELPER_STATIC overrides). */
CAE_EXPORT int cae_helper_find_static(char **path);

/* Starts argv (the helper program, possibly behind a wrapper such as bwrap ... --) with
 * envp (NULL: ours) and waits up to timeout_ms for its greeting. Returns 0 and a new
 * helper, or -errno with err naming the cause (nothing is left running). */
CAE_EXPORT int cae_helper_start(const char *const *argv, const char *const *envp,
				int64_t timeout_ms, cae_helper **out, cae_error *err);

/* Runs spec in the helper; same contract as cae_runner_run() (spec->cwd, argv[0] and envp
 * as the helper sees them; the cancel fd is watched here and forwarded). Thread-safe.
 * Additional failures: -EPIPE when the helper is gone before the command was sent (it did
 * not run: start a new helper and retry), -ECONNRESET when the helper ended during the
 * command, -ETIMEDOUT when it did not answer within the command's timeout plus a margin
 * (then the helper is killed). After any of these cae_helper_alive() is false. */
CAE_EXPORT int cae_helper_run(cae_helper *h, const cae_run_spec *spec, cae_run_result *res,
			      cae_error *err);

/* The loopback listeners of the helper's network namespace for the network proxy
 * (cae/net.h): the helper makes 127.0.0.1:CAE_HELPER_NET_HTTP_PORT and
 * :CAE_HELPER_NET_SOCKS_PORT and hands them over; the caller accepts on them (both new,
 * close-on-exec). Ask before the first command (no command may take the ports first).
 * Returns 0, or -errno with err set (-EADDRINUSE: the ports are taken). */
#define CAE_HELPER_NET_HTTP_PORT 3128
#define CAE_HELPER_NET_SOCKS_PORT 1080
CAE_EXPORT int cae_helper_net_listeners(cae_helper *h, int64_t timeout_ms, int *http_fd,
					int *socks_fd, cae_error *err);

CAE_EXPORT bool cae_helper_alive(const cae_helper *h);
CAE_EXPORT pid_t cae_helper_pid(const cae_helper *h);

/* Closes the channel (the helper kills its commands and exits), waits briefly, kills what
 * is left and frees h. No call on h may be running. Accepts NULL. */
CAE_EXPORT void cae_helper_stop(cae_helper *h);

/* ---- manager side, multiplexed: `cae-helper --stream` over any byte stream ----
 *
 * In a container the helper is reached through one Engine API exec whose stdin and stdout
 * stay open (src/docker/attach.c), wherever the engine is (unix socket or tcp://). Any
 * number of threads may run commands on one mux at once; each request is a frame with an
 * id (src/helper/mux.h). */

/* A byte stream to `cae-helper --stream`; fd is a socket (shut down to end the stream). read
 * returns bytes of the helper's stdout (> 0), 0 at end of file, -EAGAIN when nothing is there yet
 * (poll fd for POLLIN), or -errno; write sends all of p to the helper's stdin (blocking) and
 * returns 0 or -errno; close releases ctx. */
typedef struct cae_helper_link {
	int fd;
	ssize_t (*read)(void *ctx, char *buf, size_t size);
	int (*write)(void *ctx, const void *p, size_t n);
	void (*close)(void *ctx);
	void *ctx;
} cae_helper_link;

typedef struct cae_helper_mux cae_helper_mux;

/* Takes over link (closed with the mux, and on failure) and waits up to timeout_ms for the
 * helper's greeting. */
CAE_EXPORT int cae_helper_mux_open(const cae_helper_link *link, int64_t timeout_ms,
				   cae_helper_mux **out, cae_error *err);
/* Runs spec through the helper, with the contract of cae_helper_run (-EPIPE: the command
 * did not run; -ECONNRESET: the helper ended during it; -ETIMEDOUT: no answer in time).
 * env_add ("K=V", may be NULL) is added to the helper's environment; confine (may be NULL)
 * is a directory the working directory must resolve beneath (else -ENOTDIR). */
CAE_EXPORT int cae_helper_mux_run(cae_helper_mux *m, const cae_run_spec *spec,
				  const char *const *env_add, const char *confine,
				  cae_run_result *res, cae_error *err);
/* Runs a checked text editor request in the environment (the helper's editor on root, the
 * workspace as commands see it, opened with limits on first use; its undo history lasts as
 * long as the stream). Returns as cae_editor_run, or -ECONNRESET / -ETIMEDOUT / -EPROTO with
 * err set when the helper failed. */
CAE_EXPORT int cae_helper_mux_edit(cae_helper_mux *m, const char *root,
				   const cae_editor_limits *limits, const cae_editor_request *req,
				   cae_editor_result *res, cae_error *err);
/* The patch worker's file operations, run by the helper in the environment with the same
 * code as on a local host (src/worker/fs-host.c: resolution beneath the workspace, atomic
 * writes keeping modes, journaled transactions). OPEN returns a handle (root: the
 * workspace as commands see it); every other operation names it; CLOSE drops it (a
 * stream that ends drops its handles: an open transaction is then rolled back by the
 * journal's recovery). */
typedef enum cae_fs_op {
	CAE_FS_OPEN = 1,
	CAE_FS_READ,
	CAE_FS_WRITE,
	CAE_FS_REMOVE,
	CAE_FS_TXN_BEGIN,
	CAE_FS_TXN_WRITE,
	CAE_FS_TXN_REMOVE,
	CAE_FS_TXN_COMMIT,
	CAE_FS_TXN_ABORT,
	CAE_FS_CLOSE,
} cae_fs_op;

typedef struct cae_fs_request {
	cae_fs_op op;
	uint32_t handle;
	const char *root; /* OPEN */
	const char *rel;  /* READ, WRITE, REMOVE, TXN_WRITE, TXN_REMOVE */
	const char *data; /* WRITE, TXN_WRITE */
	size_t len;
	uint32_t mode; /* WRITE, TXN_WRITE: permission bits, or (uint32_t)-1 to keep */
	uint64_t max;  /* READ: most bytes (-EFBIG beyond); 0: only whether it exists */
} cae_fs_request;

typedef struct cae_fs_reply {
	uint32_t handle; /* OPEN */
	char *data;	 /* READ: owned, NUL-terminated (NULL when max was 0) */
	size_t len;
	uint32_t mode; /* READ */
} cae_fs_reply;

CAE_EXPORT void cae_fs_reply_clear(cae_fs_reply *r);

/* Runs one file operation through the helper. Returns the operation's status (0 or the
 * -errno the local implementation gives, err set), or -ECONNRESET / -ETIMEDOUT /
 * -EPROTO when the helper failed. */
CAE_EXPORT int cae_helper_mux_fs(cae_helper_mux *m, const cae_fs_request *q, cae_fs_reply *rep,
				 cae_error *err);

/* Answers git's credential requests from commands run through m (git's text protocol:
 * request "protocol=https\nhost=example.com\n..."; returns the reply, a new string
 * "username=..\npassword=..\n", or NULL to give none). Called on the mux's reader thread:
 * it must not block. */
typedef char *(*cae_helper_credential_fn)(void *ud, const char *request, size_t len);
CAE_EXPORT void cae_helper_mux_set_credentials(cae_helper_mux *m, cae_helper_credential_fn fn,
					       void *ud);
/* A round trip without a command (liveness, benchmarks). */
CAE_EXPORT int cae_helper_mux_ping(cae_helper_mux *m, int64_t timeout_ms, cae_error *err);
CAE_EXPORT bool cae_helper_mux_alive(const cae_helper_mux *m);
/* A mux to the channel helper h (cae_helper_start): a socket it serves with the protocol of
 * `cae-helper --stream`, in a thread of its own and in its confinement, until the mux is
 * closed; for commands whose output and input flow while they run (cae_live_io), which
 * cae_helper_run cannot carry. Its commands end when it is closed. Thread-safe. */
CAE_EXPORT int cae_helper_open_mux(cae_helper *h, int64_t timeout_ms, cae_helper_mux **out,
				   cae_error *err);
/* Closes the stream (the helper cancels its commands and exits) and frees m. No call on m
 * may be running. Accepts NULL. */
CAE_EXPORT void cae_helper_mux_close(cae_helper_mux *m);

/* ---- the network through the stream (src/helper/tun.c) ---- */

/* Serves one connection the helper accepted (kind 'h': its HTTP proxy port, 's': its SOCKS5
 * port): fd is the manager's end of it (a connected stream socket, taken over). Called on
 * the mux's reader thread: it must not block. */
typedef int (*cae_helper_conn_fn)(void *ud, char kind, int fd);
/* Makes the helper listen on 127.0.0.1:http_port and :socks_port in the environment (with
 * SO_REUSEPORT: another process's stream to the same environment may listen too) and add
 * env ("K=V", NULL-ended; may be NULL) to the environment of every command run through m
 * from now on, once it listens; each connection accepted there is carried over the stream
 * and handed to fn. The same port twice: one listener on it, without SO_REUSEPORT (no other
 * socket can share it; a port already taken fails, -EADDRINUSE, and no command gets env).
 * Once per stream (-EALREADY). 0 or -errno (err set). */
CAE_EXPORT int cae_helper_mux_net_listen(cae_helper_mux *m, int http_port, int socks_port,
					 const char *const *env, cae_helper_conn_fn fn, void *ud,
					 cae_error *err);
/* The same, and the helper also sends its two listeners with token to the unix socket path
 * (as the environment sees it; src/backend/net-handover.h) before it answers; until the
 * manager acknowledges them there, it accepts and carries connections over m as above. */
CAE_EXPORT int cae_helper_mux_net_listen_handover(cae_helper_mux *m, int http_port, int socks_port,
						  const char *const *env, const char *path,
						  const char *token, cae_helper_conn_fn fn,
						  void *ud, cae_error *err);
/* Carries fd (a connected stream socket, taken over) to a connection the helper makes to
 * 127.0.0.1:port in the environment (a port forward); a refused one ends fd's. */
CAE_EXPORT int cae_helper_mux_connect(cae_helper_mux *m, int port, int fd, cae_error *err);
/* Connections carried over m now. */
CAE_EXPORT int cae_helper_mux_tunnels(cae_helper_mux *m);

/* A port forward: a listening socket on 127.0.0.1 of the host (an ephemeral port) whose
 * connections are carried over m to 127.0.0.1:port in the environment, each in its own
 * tunnel. Must be closed before m. */
typedef struct cae_helper_forward cae_helper_forward;
CAE_EXPORT int cae_helper_forward_open(cae_helper_mux *m, int port, cae_helper_forward **out,
				       int *host_port, cae_error *err);
/* The environment's port and the host's. */
CAE_EXPORT int cae_helper_forward_port(const cae_helper_forward *f);
CAE_EXPORT int cae_helper_forward_host_port(const cae_helper_forward *f);
/* Stops accepting (connections already carried end with the stream). Accepts NULL. */
CAE_EXPORT void cae_helper_forward_close(cae_helper_forward *f);

#ifdef __cplusplus
}
#endif
#endif
