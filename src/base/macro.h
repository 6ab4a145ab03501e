/* Cleanup attributes, ownership hand-off and small helpers (libc only).
 *
 * _cleanup_free_ char *s = ...;      freed when s goes out of scope
 * _cleanup_close_ int fd = ...;      closed when fd goes out of scope (-1 is ignored)
 * return TAKE_PTR(s);                hands ownership to the caller
 * Destructors used with _cleanup_ accept NULL / -1.
 */
#ifndef CAE_BASE_MACRO_H
#define CAE_BASE_MACRO_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _warn_unused_result_ __attribute__((warn_unused_result))
/* Drops the result of a _warn_unused_result_ call on purpose (GCC ignores a plain (void)
 * cast); the caller says why in a comment beside it. */
#define DISCARD_RESULT(x) ((void)!(x))

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* Take ownership: returns the pointer and leaves NULL behind. */
#define TAKE_PTR(p)                                                                                \
	({                                                                                         \
		__typeof__(p) _tp_ = (p);                                                          \
		(p) = NULL;                                                                        \
		_tp_;                                                                              \
	})
/* Same for a file descriptor: returns it and leaves -1 behind. */
#define TAKE_FD(fd)                                                                                \
	({                                                                                         \
		int _tf_ = (fd);                                                                   \
		(fd) = -1;                                                                         \
		_tf_;                                                                              \
	})

static inline void cae__freep(void *p)
{
	free(*(void **)p);
}
static inline void cae__closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}
static inline void cae__fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}

#define _cleanup_free_ _cleanup_(cae__freep)
#define _cleanup_close_ _cleanup_(cae__closep)
#define _cleanup_fclose_ _cleanup_(cae__fclosep)

/* Declare a cleanup function for a type whose destructor accepts NULL:
 * DEFINE_TRIVIAL_CLEANUP_FUNC(json_t *, json_decref) -> json_decrefp */
#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)                                                    \
	static inline void func##p(type *p)                                                        \
	{                                                                                          \
		if (*p)                                                                            \
			func(*p);                                                                  \
	}

#endif
