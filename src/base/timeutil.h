/* Clocks: monotonic for durations and deadlines, realtime for timestamps. */
#ifndef CAE_BASE_TIMEUTIL_H
#define CAE_BASE_TIMEUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

static inline int64_t cae_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
static inline int64_t cae_now_ms(void)
{
	return cae_now_ns() / 1000000LL;
}
/* ISO 8601 UTC with milliseconds, e.g. 2026-11-22T02:25:36.123Z, into buf (>= 32 bytes). */
void cae_iso8601_now(char *buf, size_t size);
/* Parses an ISO 8601 / RFC 3339 UTC timestamp (fractional seconds and Z or +00:00
 * accepted, also "YYYY-MM-DD HH:MM:SS"). Returns seconds since the epoch or -1. */
int64_t cae_parse_iso8601(const char *s);

#endif
