#include "base/timeutil.h"

#include <stdio.h>
#include <string.h>

#include "base/banned.h"

void cae__iso8601_now(char *buf, size_t size)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char base[32];
	strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, size, "%s.%03ldZ", base, ts.tv_nsec / 1000000L);
}

int64_t cae__parse_iso8601(const char *s)
{
	if (!s)
		return -1;
	struct tm tm;
	memset(&tm, 0, sizeof(tm));
	const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!p)
		p = strptime(s, "%Y-%m-%d %H:%M:%S", &tm);
	if (!p)
		return -1;
	if (*p == '.')
		while (*++p >= '0' && *p <= '9')
			;
	int64_t t = (int64_t)timegm(&tm);
	if (*p == '+' || *p == '-') {
		int hh = 0, mm = 0;
		if (sscanf(p + 1, "%2d:%2d", &hh, &mm) >= 1) {
			int64_t off = (int64_t)hh * 3600 + (int64_t)mm * 60;
			t = *p == '+' ? t - off : t + off;
		}
	}
	return t;
}
