/* cae's one error model (see ARCHITECTURE.md, "Errors").
 *
 * Fallible functions return int: >= 0 on success, a negative errno value on failure.
 * Where a person needs the cause, they also take a `cae_error *err` (may be NULL) that
 * receives a message; callers on the way up add context in front with cae_error_prefix()
 * (crun's model). The struct is fixed-size: no allocation on the error path.
 *
 * Conventional codes, which every interface maps the same way (cae_error_kind()):
 *   -EINVAL   invalid argument           INVALID_ARGUMENT
 *   -ENOTDIR  not a directory / outside  NOT_DIRECTORY
 *   -ENOENT   command or file not found  COMMAND_NOT_FOUND / NOT_FOUND
 *   -EACCES   refused by policy or confinement
 *   -ETIMEDOUT, -ECANCELED, anything else: INTERNAL
 */
#ifndef CAE_ERROR_H
#define CAE_ERROR_H

#include "cae/export.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CAE_ERROR_MSG_MAX 1024

typedef struct cae_error {
	int code;			 /* negative errno, 0 when clear */
	char message[CAE_ERROR_MSG_MAX]; /* human-readable, NUL-terminated */
} cae_error;

/* Sets code and message (printf format; an argument may be err->message itself, to wrap
 * it). err may be NULL. Returns code, so that
 * `return cae_error_set(err, -EINVAL, "...")` reads naturally. */
CAE_EXPORT int cae_error_set(cae_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Puts "context: " in front of the current message. err may be NULL. Returns err->code. */
CAE_EXPORT int cae_error_prefix(cae_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
CAE_EXPORT void cae_error_clear(cae_error *err);
/* Stable upper-case name of the error kind for tool results: "INVALID_ARGUMENT", ... */
CAE_EXPORT const char *cae_error_kind(int code);

#ifdef __cplusplus
}
#endif
#endif
