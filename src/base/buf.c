#include "base/buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

void cae__buf_init(cae_buf *b, size_t max)
{
	memset(b, 0, sizeof(*b));
	b->max = max;
}

int cae__buf_reserve(cae_buf *b, size_t n)
{
	size_t want = b->len + n;
	if (want > b->max)
		want = b->max;
	if (want <= b->cap && b->data)
		return 0;
	size_t ncap = b->cap ? b->cap : 64;
	while (ncap < want)
		ncap = ncap > SIZE_MAX / 2 ? want : ncap * 2;
	if (ncap > b->max)
		ncap = b->max;
	if (ncap < want)
		ncap = want;
	char *p = realloc(b->data, ncap + 1);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = ncap;
	b->data[b->len] = '\0';
	return 0;
}

int cae__buf_append(cae_buf *b, const void *p, size_t n)
{
	b->total += n;
	size_t room = b->max - b->len;
	if (n > room) {
		b->truncated = true;
		n = room;
	}
	if (n == 0) {
		if (!b->data)
			return cae__buf_reserve(b, 0);
		return 0;
	}
	int r = cae__buf_reserve(b, n);
	if (r < 0)
		return r;
	memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int cae__buf_puts(cae_buf *b, const char *s)
{
	return cae__buf_append(b, s, strlen(s));
}

int cae__buf_vprintf(cae_buf *b, const char *fmt, va_list ap)
{
	char small[256];
	va_list aq;
	va_copy(aq, ap);
	int n = vsnprintf(small, sizeof(small), fmt, aq);
	va_end(aq);
	if (n < 0)
		return -EINVAL;
	if ((size_t)n < sizeof(small))
		return cae__buf_append(b, small, (size_t)n);
	char *big = malloc((size_t)n + 1);
	if (!big)
		return -ENOMEM;
	vsnprintf(big, (size_t)n + 1, fmt, ap);
	int r = cae__buf_append(b, big, (size_t)n);
	free(big);
	return r;
}

int cae__buf_printf(cae_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = cae__buf_vprintf(b, fmt, ap);
	va_end(ap);
	return r;
}

char *cae__buf_steal(cae_buf *b, size_t *len)
{
	if (!b->data && cae__buf_reserve(b, 0) < 0)
		return NULL;
	char *d = b->data;
	if (len)
		*len = b->len;
	size_t max = b->max;
	cae__buf_init(b, max);
	return d;
}

void cae__buf_clear(cae_buf *b)
{
	free(b->data);
	size_t max = b->max;
	cae__buf_init(b, max);
}

char *cae__memdup0(const void *p, size_t n)
{
	char *r = malloc(n + 1);
	if (!r)
		return NULL;
	if (n)
		memcpy(r, p, n);
	r[n] = '\0';
	return r;
}
