/* Clocks: monotonic for durations and deadlines, realtime for timestamps. */
#ifndef CAE_BASE_TIMEUTIL_H
#define CAE_BASE_TIMEUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

static inline int64_t cae__now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
static inline int64_t cae__now_ms(void)
{
	return cae__now_ns() / 1000000LL;
}
/* The poll() timeout that wakes at the monotonic deadline (rounded up to a millisecond, at
 * most a minute; poll loops re-check): -1 for INT64_MAX (no deadline), 0 once it has passed. */
static inline int cae__poll_timeout_ms(int64_t deadline_ns, int64_t now_ns)
{
	if (deadline_ns == INT64_MAX)
		return -1;
	if (deadline_ns <= now_ns)
		return 0;
	int64_t ms = (deadline_ns - now_ns + 999999) / 1000000;
	return ms > 60000 ? 60000 : (int)ms;
}
/* ISO 8601 UTC with milliseconds, e.g. 2026-11-22T02:25:36.123Z, into buf (>= 32 bytes). */
void cae__iso8601_now(char *buf, size_t size);
/* Parses an ISO 8601 / RFC 3339 UTC timestamp (fractional seconds and Z or +00:00
 * accepted, also "YYYY-MM-DD HH:MM:SS"). Returns seconds since the epoch or -1. */
int64_t cae__parse_iso8601(const char *s);

#endif
