#include "cae/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/banned.h"

int cae_error_set(cae_error *err, int code, const char *fmt, ...)
{
	if (!err)
		return code;
	/* formatted aside first: an argument may be err->message itself (a message wrapping
	 * the one before it) */
	char msg[sizeof(err->message)];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	memcpy(err->message, msg, sizeof(msg));
	err->code = code;
	return code;
}

int cae_error_prefix(cae_error *err, const char *fmt, ...)
{
	if (!err)
		return 0;
	char ctx[CAE_ERROR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ctx, sizeof(ctx), fmt, ap);
	va_end(ap);
	char old[CAE_ERROR_MSG_MAX];
	memcpy(old, err->message, sizeof(old));
	old[sizeof(old) - 1] = '\0';
	size_t n = strlen(ctx);
	if (n > sizeof(err->message) - 3)
		n = sizeof(err->message) - 3;
	memcpy(err->message, ctx, n);
	memcpy(err->message + n, ": ", 2);
	size_t room = sizeof(err->message) - n - 2;
	size_t ol = strnlen(old, room - 1);
	memcpy(err->message + n + 2, old, ol);
	err->message[n + 2 + ol] = '\0';
	return err->code;
}

void cae_error_clear(cae_error *err)
{
	if (!err)
		return;
	err->code = 0;
	err->message[0] = '\0';
}

const char *cae_error_kind(int code)
{
	switch (code) {
	case -EINVAL:
		return "INVALID_ARGUMENT";
	case -ENOTDIR:
		return "NOT_DIRECTORY";
	case -ENOENT:
	case -ESRCH:
		return "NOT_FOUND";
	case -EHOSTUNREACH:
	case -ENETUNREACH:
	case -ECONNREFUSED:
	case -ECONNRESET:
	case -EAGAIN:
		return "UNAVAILABLE";
	case -EACCES:
	case -EPERM:
		return "PERMISSION_DENIED";
	case -EEXIST:
		return "ALREADY_EXISTS";
	case -EBUSY:
		return "FAILED_PRECONDITION";
	case -ETIMEDOUT:
		return "TIMEOUT";
	case -ECANCELED:
		return "CANCELLED";
	default:
		return "INTERNAL";
	}
}
