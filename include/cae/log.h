/* cae's logger: JSON lines with levels, stable event names and secret redaction.
 *
 * The CLI or the server creates one logger (on stderr: stdout belongs to results and to the
 * MCP protocol) and hands it to library code, which never writes by itself. Every function
 * accepts a NULL logger and then does nothing (the redaction helpers still redact URLs).
 *
 * One event is one line, written with a single write(2) under the logger's mutex, so lines
 * from concurrent threads never interleave:
 *   {"ts":"2026-11-22T02:25:36.123Z","level":"info","event":"worker.command_executed",
 *    "msg":"...","duration_ms":12,...}
 * "ts", "level" and "event" come first; "msg" is present when a message was given; the
 * fields follow (a field named ts, level, event or msg is dropped). Event names are stable
 * dotted identifiers ("module.what_happened"); the message is for people.
 *
 * Masking (cae/secrets.h), applied to the event name, the message and every string in the
 * fields (object keys and nested values too): every occurrence of a secret registered in
 * the logger's cae_secrets becomes "***", and so do the credentials of any URL.
 * Strings are made valid UTF-8 and each is capped at CAE_LOG_MAX_STRING bytes.
 *
 * Thread-safe: one logger may be used from any number of threads.
 */
#ifndef CAE_LOG_H
#define CAE_LOG_H

#include "cae/export.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>

#include "cae/secrets.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CAE_LOG_MAX_STRING (64 * 1024)	       /* bytes per string in a line; longer: cut, marked */
#define CAE_LOG_MIN_SECRET CAE_SECRETS_MIN_LEN /* shorter secrets are refused */

typedef enum cae_log_level {
	CAE_LOG_DEBUG = 0,
	CAE_LOG_INFO,
	CAE_LOG_WARN,
	CAE_LOG_ERROR,
} cae_log_level;

typedef struct cae_log cae_log;

/* A logger writing to fd (borrowed: not closed by cae_log_free) the events at min_level or
 * above. Returns NULL on ENOMEM. */
CAE_EXPORT cae_log *cae_log_new(int fd, cae_log_level min_level);
CAE_EXPORT void cae_log_free(cae_log *log); /* accepts NULL */

CAE_EXPORT void cae_log_set_level(cae_log *log, cae_log_level min_level);
/* True when an event of this level would be written (to skip building costly fields). */
CAE_EXPORT bool cae_log_enabled(const cae_log *log, cae_log_level level);

/* "debug", "info", "warn" (or "warning"), "error", any case. Returns 0 or -EINVAL. */
CAE_EXPORT int cae_log_level_parse(const char *s, cae_log_level *out);
CAE_EXPORT const char *cae_log_level_name(cae_log_level level);

/* The secrets masked in this logger's lines: owned by the logger, borrowed by the caller
 * for the logger's life. NULL for a NULL logger. */
CAE_EXPORT cae_secrets *cae_log_secrets(cae_log *log);
/* cae_secrets_add on the logger's secrets (0 for a NULL logger). */
CAE_EXPORT int cae_log_add_secret(cae_log *log, const char *secret);

/* Writes an event. fmt (may be NULL) gives the "msg" field, printf-style. */
CAE_EXPORT void cae_log_event(cae_log *log, cae_log_level level, const char *event, const char *fmt,
			      ...) __attribute__((format(printf, 4, 5)));
CAE_EXPORT void cae_log_eventv(cae_log *log, cae_log_level level, const char *event,
			       const char *fmt, va_list ap) __attribute__((format(printf, 4, 0)));
/* Same with structured fields: `fields` is a JSON object and is STOLEN (its reference is
 * released in every case, also when log is NULL, the level is filtered or fields is not an
 * object), so `cae_log_fields(log, CAE_LOG_INFO, "x.y", json_pack(...), NULL)` does not
 * leak. fields may be NULL. */
CAE_EXPORT void cae_log_fields(cae_log *log, cae_log_level level, const char *event, json_t *fields,
			       const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Returns a new string in which the credentials of every URL in text are replaced by ***
 * ("scheme://" then the userinfo up to the last '@' of the authority):
 * clone https://x-access-token:abc@github.com/o/r.git -> clone https:// ***@github.com/o/r.git
 * NULL only on ENOMEM (or text NULL). cae_secrets_mask(NULL, text). */
CAE_EXPORT char *cae_redact_url(const char *text);
/* cae_secrets_mask with the logger's secrets (log may be NULL: URLs only). New string;
 * NULL only on ENOMEM (or text NULL). */
CAE_EXPORT char *cae_redact(const cae_log *log, const char *text);
/* Same for a byte string of len bytes (may contain NULs); *out_len receives the length. */
CAE_EXPORT char *cae_redactn(const cae_log *log, const char *text, size_t len, size_t *out_len);
/* cae_secrets_mask_json with the logger's secrets, strings capped at CAE_LOG_MAX_STRING.
 * NULL on ENOMEM. value is borrowed. */
CAE_EXPORT json_t *cae_redact_json(const cae_log *log, const json_t *value);

#ifdef __cplusplus
}
#endif
#endif
