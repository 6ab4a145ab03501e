/* Internal to src/docker: the client's pieces that tests reach directly (DOCKER_HOST
 * parsing, version negotiation, the stream demultiplexer, the exec wrapper's header line)
 * and what exec.c needs from client.c. */
#ifndef CAE_DOCKER_INTERNAL_H
#define CAE_DOCKER_INTERNAL_H

#include "docker/curl-lazy.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cae/docker.h"

/* ---- DOCKER_HOST ---- */

typedef struct cae_docker_endpoint {
	bool is_unix;
	char *socket_path; /* unix: the socket; else NULL */
	char *base_url;	   /* "http://localhost" for unix, "http://host:port" for tcp */
	char *host;	   /* normalised DOCKER_HOST text */
} cae_docker_endpoint;

/* Parses a DOCKER_HOST value (see include/cae/docker.h). NULL/"" = the default. */
int cae__docker_endpoint_parse(const char *host, cae_docker_endpoint *ep, cae_error *err);
void cae__docker_endpoint_clear(cae_docker_endpoint *ep);

/* ---- API versions ---- */

/* Compares "1.41"-style versions numerically (1.9 < 1.10). Unparsable sorts lowest. */
int cae__docker_version_cmp(const char *a, const char *b);
/* The version to speak with an engine advertising `server` (NULL: unknown, speak
 * CAE_DOCKER_API_MAX): min(server, MAX). -ENOTSUP when server < MIN. out >= 16 bytes. */
int cae__docker_negotiate(const char *server, char *out, size_t size, cae_error *err);

/* ---- the multiplexed stream (attach and exec with Tty false) ----
 * Frames: 8-byte header {stream (0 stdin, 1 stdout, 2 stderr), 0, 0, 0, size (uint32 big
 * endian)} then size bytes. Headers and payloads may be split anywhere across reads. */
typedef int (*cae_docker_demux_fn)(void *ud, int stream, const char *p, size_t n);

typedef struct cae_docker_demux {
	unsigned char hdr[8];
	size_t hdr_len;
	uint32_t left; /* payload bytes still to come in the current frame */
	int stream;
} cae_docker_demux;

void cae__docker_demux_init(cae_docker_demux *dm);
/* Feeds n bytes; calls fn for each payload piece. -EPROTO on a bad header; fn's negative
 * return is passed up. */
int cae__docker_demux_feed(cae_docker_demux *dm, const char *p, size_t n, cae_docker_demux_fn fn,
			   void *ud);
/* True between frames (a stream that ends elsewhere was cut). */
bool cae__docker_demux_idle(const cae_docker_demux *dm);

/* ---- the exec wrapper's first stderr line: "cae-exec PID PGID STATUS\n" ---- */

typedef enum cae_docker_wrap_status {
	CAE_WRAP_NONE = 0, /* no header (yet, or not a wrapper) */
	CAE_WRAP_OK,
	CAE_WRAP_NOCWD,
	CAE_WRAP_OUTSIDE,
	CAE_WRAP_NOTFOUND,
} cae_docker_wrap_status;

#define CAE_DOCKER_WRAP_HEADER_MAX 96

typedef struct cae_docker_wrap_header {
	char buf[CAE_DOCKER_WRAP_HEADER_MAX];
	size_t len;
	bool done; /* the header was consumed, or stderr turned out not to start with one */
	cae_docker_wrap_status status;
	int pid;
	int pgid;
} cae_docker_wrap_header;

/* Consumes stderr bytes while the header is pending; returns how many of the n bytes
 * belong to the header (the rest is the command's stderr). When stderr does not start with
 * the header, done is set with status NONE and *replay and *replay_len give bytes held back
 * that belong to the command (borrowed from h). */
size_t cae__docker_wrap_header_feed(cae_docker_wrap_header *h, const char *p, size_t n,
				    const char **replay, size_t *replay_len);

/* The wrapper and kill scripts (POSIX sh), for tests and for docs. */
extern const char cae__docker_wrapper_script[];
extern const char cae__docker_kill_script[];

/* A connection of our own (libcurl CONNECT_ONLY), hijacked by the engine for an exec. */
typedef struct cae_docker_conn {
	CURL *h;
	curl_socket_t sock;
} cae_docker_conn;

/* ---- client.c, for exec.c ---- */

/* Negotiates if needed and writes "/v1.41" into prefix (>= 16 bytes). */
int cae__docker_version_prefix(cae_docker *d, char *prefix, size_t size, cae_error *err);
/* A new easy handle connected (CONNECT_ONLY) to the engine; *sock its socket. */
int cae__docker_connect_raw(cae_docker *d, int64_t timeout_ms, CURL **out, curl_socket_t *sock,
			    cae_error *err);
/* cae_docker_call for endpoints whose body is not JSON (logs, archives): *body (new,
 * NUL-terminated) and *len receive the raw body of a 2xx answer. */
int cae__docker_call_raw(cae_docker *d, const char *method, const char *path, char **body,
			 size_t *len, cae_error *err);
/* Percent-encodes s for a URL path segment or query value (new string, NULL on ENOMEM). */
char *cae__docker_escape(const char *s);
/* Maps an HTTP status to -errno (>= 400). */
int cae__docker_status_errno(long status);
/* The engine's message from an error body: {"message": "..."} or the text itself; writes a
 * NUL-terminated, single-line excerpt into out. */
void cae__docker_error_message(const char *body, size_t len, char *out, size_t size);

#endif
