/* The helper channel's wire format (internal to src/helper): what the manager sends to
 * cae-helper for one command and what comes back.
 *
 * A message is a frame: a little-endian u32 body length, then the body: one type byte
 * ('Q' request, 'R' response) and fields, each a tag byte, a little-endian u32 length and
 * that many bytes. Integers are little-endian i64 (8 bytes); strings carry no NUL. Unknown
 * tags are skipped, so that either side may learn new fields first. Both decoders take
 * untrusted bytes (the helper runs inside the sandbox the command may have subverted): they
 * bound every length, refuse NUL inside argv/env/cwd, and make outputs valid UTF-8. */
#ifndef CAE_HELPER_PROTO_H
#define CAE_HELPER_PROTO_H

#include "base/buf.h"
#include "cae/editor.h"
#include "cae/error.h"
#include "cae/helper.h"
#include "cae/runner.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CAE_HELPER_FRAME_HEADER 4
/* The byte the helper writes on a command's socket as soon as it has read the request, before
 * the answer: end of file before it means the command did not run. */
#define CAE_HELPER_ACK 'A'
/* Largest body either side accepts; a request's stdin and a response's two streams fit. */
#define CAE_HELPER_MAX_FRAME (512u * 1024u * 1024u)
#define CAE_HELPER_MAX_ARGS 65536

/* What a request carries besides a run spec. */
typedef struct cae_helper_request_extra {
	const char *const *env_add; /* "K=V" added to the helper's environment (envp NULL) */
	const char *confine;	    /* cwd must resolve beneath this directory (-ENOTDIR) */
} cae_helper_request_extra;

/* A decoded request: spec points into the owned copies below; spec.cancel_fd is -1 (the
 * receiver sets its own). */
typedef struct cae_helper_request {
	cae_run_spec spec;
	char **argv;	/* NULL-terminated */
	char **envp;	/* NULL-terminated, or NULL: inherit the helper's environment */
	char **env_add; /* NULL-terminated, or NULL */
	char *cwd;
	char *confine;
	char *stdin_data;
} cae_helper_request;

/* Appends the frame of spec (header included) to out. spec's cancel fd is not sent. x may
 * be NULL. */
int cae__helper_encode_request(const cae_run_spec *spec, const cae_helper_request_extra *x,
			       cae_buf *out);
/* Decodes a body (without the header). Returns 0 or -EINVAL (err says what is wrong). */
int cae__helper_decode_request(const char *body, size_t len, cae_helper_request *req,
			       cae_error *err);
void cae__helper_request_clear(cae_helper_request *req);

/* Appends the frame of a command's outcome: status is cae_runner_run()'s return value,
 * message its error text when status < 0, res its result when status == 0. */
int cae__helper_encode_response(int status, const char *message, const cae_run_result *res,
				cae_buf *out);
/* Decodes a response body into *status, err (when *status < 0: its code and message) and
 * res (when *status == 0; owned, valid UTF-8). Returns 0, or -EINVAL for a malformed body
 * (then res holds nothing to free). */
int cae__helper_decode_response(const char *body, size_t len, int *status, cae_run_result *res,
				cae_error *err);

/* ---- the text editor through the helper (mux frames EDIT / EDIT_RESULT) ---- */

/* A decoded edit request: req's strings point into the owned copies. */
typedef struct cae_helper_edit {
	char *root; /* the workspace directory in the environment (also the display root) */
	cae_editor_limits limits;
	cae_editor_request req;
	char *path, *text, *new_str;
} cae_helper_edit;

/* Appends an edit request's frame (header included) to out. */
int cae__helper_encode_edit(const char *root, const cae_editor_limits *limits,
			    const cae_editor_request *req, cae_buf *out);
int cae__helper_decode_edit(const char *body, size_t len, cae_helper_edit *e, cae_error *err);
void cae__helper_edit_clear(cae_helper_edit *e);
/* status < 0: the editor failed (message says why); else res is the result. */
int cae__helper_encode_edit_result(int status, const char *message, const cae_editor_result *res,
				   cae_buf *out);
/* Decodes into *status, err (status < 0) and res (owned; valid UTF-8). -EINVAL: malformed. */
int cae__helper_decode_edit_result(const char *body, size_t len, int *status,
				   cae_editor_result *res, cae_error *err);

/* ---- file operations (mux frames FS / FS_RESULT) ---- */

/* A decoded file operation: q's strings point into the owned copies. */
typedef struct cae_helper_fs {
	cae_fs_request q;
	char *root, *rel, *data;
} cae_helper_fs;

int cae__helper_encode_fs(const cae_fs_request *q, cae_buf *out);
int cae__helper_decode_fs(const char *body, size_t len, cae_helper_fs *f, cae_error *err);
void cae__helper_fs_clear(cae_helper_fs *f);
int cae__helper_encode_fs_result(int status, const char *message, const cae_fs_reply *rep,
				 cae_buf *out);
/* Decodes into *status, err (status < 0) and rep (owned). -EINVAL: malformed. */
int cae__helper_decode_fs_result(const char *body, size_t len, int *status, cae_fs_reply *rep,
				 cae_error *err);

/* What a socket handed over the channel is for: one command (request, acknowledgement,
 * answer), or a multiplexed stream (mux.h) served until it closes, for commands whose output
 * and input flow while they run. */
#define CAE_HELPER_FD_COMMAND 'r'
#define CAE_HELPER_FD_STREAM 's'
/* The helper makes its loopback listeners for the network proxy and sends them back on the
 * socket (net.c). */
#define CAE_HELPER_FD_NET 'n'
int cae__helper_net_listen(int fd, int http_port, int socks_port);
/* A socket listening on 127.0.0.1:port (SO_REUSEADDR: a port whose last connections are in
 * TIME_WAIT is taken, one another socket listens on is not; share: SO_REUSEPORT too, which
 * lets a socket of the same uid listen on it as well), or -errno. */
int cae__helper_listen_loopback(int port, bool share);
/* A container's listeners handed to its manager (src/backend/net-handover.h): connects to
 * the unix socket path and sends token with hfd and sfd (SCM_RIGHTS), without blocking.
 * Returns the connection (the manager's acknowledgement, a byte 'k', comes on it), or
 * -errno. */
int cae__helper_net_handover(const char *path, const char *token, int hfd, int sfd);

/* The channel: one message carrying fd (SCM_RIGHTS) and its kind (CAE_HELPER_FD_*) to the
 * other side. Returns 0 or -errno. */
int cae__helper_send_fd(int ctl, int fd, char kind);
/* Receives one message; returns the fd it carried (close-on-exec; extra fds are closed), -1
 * for a message without one, -EPIPE at end of file, -errno on error. *kind gets the
 * message's byte. */
int cae__helper_recv_fd(int ctl, char *kind);

/* Serves one request body (helper side): decodes it (server_env, "K=V" or NULL, is added to
 * the command's environment after the request's own additions), calls ack (false: the manager is
 * gone, the command is not run), runs it with cancel_fd (-1: none) and live (NULL: none) and
 * appends the response frame (header included) to out, which must be empty. Returns 0, or
 * -ENOMEM when no response could be made. */
int cae__helper_handle_request(const char *body, size_t len, int cancel_fd, const cae_live_io *live,
			       bool (*ack)(void *ud), void *ud, const char *const *server_env,
			       cae_buf *out);

/* The body length a frame header announces. */
uint32_t cae__helper_frame_length(const unsigned char header[CAE_HELPER_FRAME_HEADER]);

#endif
