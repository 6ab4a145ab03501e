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
 *   -ENOENT   not found (a file, command, repository, branch, environment, image)
 *             NOT_FOUND (COMMAND_NOT_FOUND for exec_command's direct mode); -ESRCH too
 *   -EACCES   refused by policy or confinement  PERMISSION_DENIED
 *   -EHOSTUNREACH, -ENETUNREACH, -ECONNREFUSED, -ECONNRESET, -EAGAIN: something needed is
 *             not reachable or not ready now (a remote, an engine)  UNAVAILABLE
 *   -EEXIST   something of that name exists and is not to be replaced (a task uuid another
 *             cae instance uses)  ALREADY_EXISTS
 *   -EBUSY    not in the state the operation needs (an environment whose re-prepare would
 *             lose uncommitted files or running work; a mount still in use)
 *             FAILED_PRECONDITION
 *   -ETIMEDOUT TIMEOUT, -ECANCELED CANCELLED; anything else: INTERNAL (cae's own failure)
 * Tool results, MCP results and the CLI's messages say the kind in front of a message a user
 * can act on ("NOT_FOUND: ..."), so that a user's mistake never reads as cae's.
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
