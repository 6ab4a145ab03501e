/* A growable byte buffer with a mandatory maximum (curl's dynbuf idea).
 *
 * Everything a model or a command can make us allocate goes through one of these: the
 * maximum is fixed at init, appends past it are dropped and recorded in `truncated`,
 * `total` counts every byte offered. Data is always NUL-terminated (not counted in len).
 */
#ifndef CAE_BASE_BUF_H
#define CAE_BASE_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/macro.h"

typedef struct cae_buf {
	char *data;	/* owned; NULL until the first append */
	size_t len;	/* bytes kept */
	size_t cap;	/* bytes allocated (excluding the NUL) */
	size_t max;	/* most bytes ever kept */
	uint64_t total; /* bytes offered, kept or not */
	bool truncated; /* some bytes were dropped */
} cae_buf;

void cae__buf_init(cae_buf *b, size_t max);
/* Keeps what fits under max, records the rest as truncated. Returns 0 (also when bytes were
 * dropped at the maximum), or -ENOMEM (printf: -EINVAL for a bad format), and then the
 * buffer lacks the bytes offered: a caller building something that must be whole checks. */
_warn_unused_result_ int cae__buf_append(cae_buf *b, const void *p, size_t n);
_warn_unused_result_ int cae__buf_puts(cae_buf *b, const char *s);
_warn_unused_result_ int cae__buf_printf(cae_buf *b, const char *fmt, ...) _printf_(2, 3);
_warn_unused_result_ int cae__buf_vprintf(cae_buf *b, const char *fmt, va_list ap) _printf_(2, 0);
/* Makes sure `n` more bytes can be kept without reallocating (bounded by max). */
_warn_unused_result_ int cae__buf_reserve(cae_buf *b, size_t n);
/* Hands the data to the caller (never NULL on success: "" for an empty buffer) and
 * resets the buffer. Returns NULL only on allocation failure. */
char *cae__buf_steal(cae_buf *b, size_t *len);
/* Frees the data and resets; the maximum is kept. Accepts a zeroed buffer. */
void cae__buf_clear(cae_buf *b);

/* A new NUL-terminated copy of the n bytes at p (which may hold NULs). NULL only on ENOMEM. */
char *cae__memdup0(const void *p, size_t n);

#endif
