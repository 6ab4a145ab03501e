/* JSON-RPC 2.0 over a newline-delimited byte stream (the MCP stdio transport).
 *
 * Three layers, each usable alone (the MCP server and the fuzz target use all three):
 *   framing     bytes -> lines, with a maximum line length (an oversized line is dropped up
 *               to its newline and reported once, so the stream stays usable);
 *   parsing     a line -> a JSON object or array (a batch), with a maximum nesting depth
 *               checked before the JSON parser runs;
 *   validation  a JSON value -> request, notification or response, per JSON-RPC 2.0 with
 *               MCP's rule that ids are strings or integers.
 * Failures carry a JSON-RPC error code and a message ready to send (cae_jsonrpc_err).
 */
#ifndef CAE_JSONRPC_H
#define CAE_JSONRPC_H

#include "cae/export.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes of JSON-RPC 2.0 (section 5.1). -32000..-32099 are for the server. */
#define CAE_JSONRPC_PARSE_ERROR -32700
#define CAE_JSONRPC_INVALID_REQUEST -32600
#define CAE_JSONRPC_METHOD_NOT_FOUND -32601
#define CAE_JSONRPC_INVALID_PARAMS -32602
#define CAE_JSONRPC_INTERNAL_ERROR -32603
#define CAE_JSONRPC_SERVER_BUSY -32000
#define CAE_JSONRPC_SERVER_NOT_INITIALIZED -32002 /* a request before initialize */

/* Bytes per line: a request as large as the tools document (apply_patch's 64 MiB patch with
 * the escaping JSON adds to ordinary text, text_editor's 10 MiB file_text) fits. */
#define CAE_JSONRPC_DEFAULT_MAX_MESSAGE ((size_t)96 << 20)
#define CAE_JSONRPC_DEFAULT_MAX_DEPTH 64u /* nested arrays/objects */

/* A protocol failure: code is one of the CAE_JSONRPC_* codes, message is what the peer
 * reads in error.message. Fixed size; no allocation on the error path. */
typedef struct cae_jsonrpc_err {
	int code;
	char message[256];
} cae_jsonrpc_err;

/* ---- framing ------------------------------------------------------------------------ */

typedef struct cae_jsonrpc_framer cae_jsonrpc_framer;

/* New framer for lines of at most max_line bytes (0: CAE_JSONRPC_DEFAULT_MAX_MESSAGE),
 * not counting the newline. Memory stays below about max_line + 64 KiB. NULL on ENOMEM. */
CAE_EXPORT cae_jsonrpc_framer *cae_jsonrpc_framer_new(size_t max_line);
CAE_EXPORT void cae_jsonrpc_framer_free(cae_jsonrpc_framer *f);

/* Appends bytes. Takes at most what fits under the framer's bound and returns how many it
 * took (call cae_jsonrpc_framer_next until it returns 0, then feed the rest); -ENOMEM. */
CAE_EXPORT long cae_jsonrpc_framer_feed(cae_jsonrpc_framer *f, const void *data, size_t n);
/* One read(2) from fd into the framer: > 0 bytes read, 0 at end of file, -errno
 * (EINTR is retried; -EAGAIN for a non-blocking fd with nothing to read). Call it only
 * after cae_jsonrpc_framer_next returned 0. */
CAE_EXPORT long cae_jsonrpc_framer_read(cae_jsonrpc_framer *f, int fd);

/* The next complete line. Returns 1 with *line (NUL-terminated, without the newline and
 * a trailing CR; borrowed, valid until the next feed/read/finish/free) and *len; 0 when
 * more input is needed; -E2BIG when a line longer than the maximum was dropped (reported
 * once per line, when its end is reached; its bytes are skipped without being kept).
 * Blank lines are skipped. */
CAE_EXPORT int cae_jsonrpc_framer_next(cae_jsonrpc_framer *f, const char **line, size_t *len);
/* At end of input: the unterminated rest as a last line (same returns as _next; 0 when
 * nothing is left). */
CAE_EXPORT int cae_jsonrpc_framer_finish(cae_jsonrpc_framer *f, const char **line, size_t *len);
/* After -E2BIG: the dropped line's top-level "id" (a string or an integer, read as the line
 * went by), new reference; NULL when it had none that could be read. */
CAE_EXPORT json_t *cae_jsonrpc_framer_dropped_id(const cae_jsonrpc_framer *f);

/* ---- parsing and validation --------------------------------------------------------- */

/* Parses one message text: a JSON object (one message) or array (a batch). Nesting deeper
 * than max_depth (0: the default) is refused before parsing. Returns 0 with *out (new
 * reference), or -EINVAL with e set: -32700 for text that is not JSON, -32600 for JSON that
 * is neither object nor array, or too deep. */
CAE_EXPORT int cae_jsonrpc_parse(const char *text, size_t len, unsigned max_depth, json_t **out,
				 cae_jsonrpc_err *e);

typedef enum cae_jsonrpc_kind {
	CAE_JSONRPC_REQUEST,	  /* method and id */
	CAE_JSONRPC_NOTIFICATION, /* method, no id: never answered */
	CAE_JSONRPC_RESPONSE,	  /* result or error, and id */
} cae_jsonrpc_kind;

/* One validated message; every pointer is borrowed from the JSON value it came from. */
typedef struct cae_jsonrpc_msg {
	cae_jsonrpc_kind kind;
	const char *method; /* requests and notifications */
	json_t *id;	    /* requests and responses (a response's id may be JSON null) */
	json_t *params;	    /* object or array, NULL when absent */
	json_t *result;	    /* responses: exactly one of result and error */
	json_t *error;
} cae_jsonrpc_msg;

/* Validates one message. Returns 0 with *m filled, or -EINVAL with e set (-32600); then
 * m->id is the message's id when that id itself was valid (to answer with), else NULL. */
CAE_EXPORT int cae_jsonrpc_validate(json_t *v, cae_jsonrpc_msg *m, cae_jsonrpc_err *e);

/* True for a valid request id: a string or an integer. */
CAE_EXPORT bool cae_jsonrpc_id_valid(const json_t *id);

/* A number too large for jansson (an integer beyond int64, a real beyond double) as a
 * request's "id" or notifications/cancelled's "requestId": cae_jsonrpc_parse keeps it as a
 * string holding a NUL byte and the token as the client wrote it (no other string can
 * start with NUL), and cae_jsonrpc_encode writes a message's such id back as that number.
 * Returns the token (borrowed, *len bytes) when v is one, else NULL. */
CAE_EXPORT const char *cae_jsonrpc_raw_number(const json_t *v, size_t *len);

/* ---- building and encoding ---------------------------------------------------------- */

/* {"jsonrpc":"2.0","id":id,"result":result}. id is borrowed (NULL: null), result stolen.
 * New reference, NULL on ENOMEM. */
CAE_EXPORT json_t *cae_jsonrpc_result(json_t *id, json_t *result);
/* {"jsonrpc":"2.0","id":id,"error":{"code","message","data"?}}. id borrowed (NULL: null),
 * data stolen (may be NULL). An invalid UTF-8 message is repaired. New reference. */
CAE_EXPORT json_t *cae_jsonrpc_error(json_t *id, int code, const char *message, json_t *data);
/* {"jsonrpc":"2.0","method":method,"params":params?}. params stolen (may be NULL). */
CAE_EXPORT json_t *cae_jsonrpc_notification(const char *method, json_t *params);

/* Compact one-line JSON followed by "\n" (strings never contain a raw newline); a
 * message's raw-number id (cae_jsonrpc_raw_number) is written as the number. New string,
 * NULL on ENOMEM. */
CAE_EXPORT char *cae_jsonrpc_encode(const json_t *msg, size_t *len);

/* Fills e and returns -EINVAL. */
CAE_EXPORT int cae_jsonrpc_err_set(cae_jsonrpc_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif
#endif
