/* Bounded capture of one output stream (internal to libcae: the local runner and the Docker
 * exec client share it, so that both backends truncate the same way).
 *
 * HEAD keeps the first max bytes. HEAD_TAIL keeps the first max/2 and the last max - max/2
 * bytes (a ring), and on finish joins them with a marker saying how much was omitted.
 * Finishing yields valid UTF-8 no longer than max bytes (plus the marker), cut at character
 * boundaries, invalid sequences replaced by U+FFFD. */
#ifndef CAE_RUNNER_CAPTURE_H
#define CAE_RUNNER_CAPTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "cae/runner.h"

typedef struct cae_capture {
	cae_truncate_mode mode;
	size_t max;
	cae_buf head;	 /* first bytes (max, or max/2 in HEAD_TAIL) */
	char *ring;	 /* HEAD_TAIL: the last bytes, circular; NULL until needed */
	size_t ring_cap; /* max - max/2 */
	size_t ring_len; /* bytes in the ring */
	size_t ring_pos; /* next write position */
	uint64_t total;	 /* every byte offered */
} cae_capture;

void cae__capture_init(cae_capture *c, size_t max, cae_truncate_mode mode);
/* True when further bytes would be dropped anyway (HEAD mode, cap reached): callers may
 * discard without copying. */
bool cae__capture_full(const cae_capture *c);
int cae__capture_add(cae_capture *c, const char *p, size_t n);
bool cae__capture_truncated(const cae_capture *c);
/* Produces the text (new string, *len its length) and resets the capture. NULL on ENOMEM. */
char *cae__capture_finish(cae_capture *c, size_t *len, bool *truncated);
void cae__capture_clear(cae_capture *c);

/* Makes arbitrary bytes valid UTF-8 and at most max bytes (cut at a character boundary).
 * New string. */
char *cae__text_sanitize_cap(const char *s, size_t n, size_t max, size_t *out_len, bool *cut);

#endif
