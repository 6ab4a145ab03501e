#include "runner/capture.h"

#include "base/macro.h"
#include "base/utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

void cae__capture_init(cae_capture *c, size_t max, cae_truncate_mode mode)
{
	memset(c, 0, sizeof(*c));
	c->mode = mode;
	c->max = max;
	if (mode == CAE_TRUNCATE_HEAD_TAIL && max >= 2) {
		cae__buf_init(&c->head, max / 2);
		c->ring_cap = max - max / 2;
	} else {
		c->mode = CAE_TRUNCATE_HEAD;
		cae__buf_init(&c->head, max);
	}
}

bool cae__capture_full(const cae_capture *c)
{
	return c->mode == CAE_TRUNCATE_HEAD && c->head.len >= c->head.max;
}

int cae__capture_add(cae_capture *c, const char *p, size_t n)
{
	c->total += n;
	size_t room = c->head.max - c->head.len;
	size_t take = MIN(room, n);
	if (take) {
		int r = cae__buf_append(&c->head, p, take);
		if (r < 0)
			return r;
		p += take;
		n -= take;
	}
	if (n == 0)
		return 0;
	if (c->mode == CAE_TRUNCATE_HEAD) {
		c->head.truncated = true;
		return 0;
	}
	if (!c->ring) {
		c->ring = malloc(c->ring_cap);
		if (!c->ring)
			return -ENOMEM;
	}
	if (n >= c->ring_cap) {
		/* Only the last ring_cap bytes survive. */
		memcpy(c->ring, p + n - c->ring_cap, c->ring_cap);
		c->ring_len = c->ring_cap;
		c->ring_pos = 0;
		return 0;
	}
	size_t first = MIN(n, c->ring_cap - c->ring_pos);
	memcpy(c->ring + c->ring_pos, p, first);
	memcpy(c->ring, p + first, n - first);
	c->ring_pos = (c->ring_pos + n) % c->ring_cap;
	c->ring_len = MIN(c->ring_len + n, c->ring_cap);
	return 0;
}

bool cae__capture_truncated(const cae_capture *c)
{
	return c->total > c->max;
}

char *cae__text_sanitize_cap(const char *s, size_t n, size_t max, size_t *out_len, bool *cut)
{
	size_t l;
	char *t = cae__utf8_sanitize(s, n, &l);
	if (!t)
		return NULL;
	bool was_cut = false;
	if (l > max) {
		/* Sanitized text is valid UTF-8: step back to a character start. */
		size_t m = max;
		while (m > 0 && ((unsigned char)t[m] & 0xC0) == 0x80)
			m--;
		l = m;
		t[l] = '\0';
		was_cut = true;
	}
	if (out_len)
		*out_len = l;
	if (cut)
		*cut = was_cut;
	return t;
}

char *cae__capture_finish(cae_capture *c, size_t *len, bool *truncated)
{
	bool trunc = cae__capture_truncated(c);
	char *res = NULL;
	size_t rlen = 0;
	if (c->mode == CAE_TRUNCATE_HEAD || c->ring_len == 0) {
		size_t n = c->head.len;
		if (trunc)
			n = cae__utf8_floor(c->head.data ? c->head.data : "", n);
		bool cut;
		res = cae__text_sanitize_cap(c->head.data ? c->head.data : "", n, c->max, &rlen,
					     &cut);
		trunc = trunc || cut;
	} else if (!trunc) {
		/* Everything fits: head then the ring in order. */
		cae_buf all;
		cae__buf_init(&all, c->max);
		int r = cae__buf_append(&all, c->head.data, c->head.len);
		size_t start = c->ring_len < c->ring_cap ? 0 : c->ring_pos;
		size_t first = MIN(c->ring_len, c->ring_cap - start);
		r |= cae__buf_append(&all, c->ring + start, first);
		r |= cae__buf_append(&all, c->ring, c->ring_len - first);
		if (r < 0) { /* never a part of the output as all of it */
			cae__buf_clear(&all);
			return NULL;
		}
		res =
		    cae__text_sanitize_cap(all.data ? all.data : "", all.len, c->max, &rlen, NULL);
		cae__buf_clear(&all);
	} else {
		size_t tail_len = c->ring_len;
		char *tail = malloc(tail_len + 1);
		if (!tail)
			return NULL;
		size_t start = c->ring_len < c->ring_cap ? 0 : c->ring_pos;
		size_t first = MIN(c->ring_len, c->ring_cap - start);
		memcpy(tail, c->ring + start, first);
		memcpy(tail + first, c->ring, c->ring_len - first);
		size_t hn = cae__utf8_floor(c->head.data, c->head.len);
		size_t toff = cae__utf8_ceil(tail, tail_len, 0);
		uint64_t omitted = c->total - hn - (tail_len - toff);
		_cleanup_free_ char *h = cae__utf8_sanitize(c->head.data, hn, NULL);
		_cleanup_free_ char *t = cae__utf8_sanitize(tail + toff, tail_len - toff, NULL);
		free(tail);
		if (!h || !t)
			return NULL;
		char marker[96];
		snprintf(marker, sizeof(marker), "\n\n[... %llu bytes omitted ...]\n\n",
			 (unsigned long long)omitted);
		size_t lh = strlen(h), lm = strlen(marker), lt = strlen(t);
		res = malloc(lh + lm + lt + 1);
		if (!res)
			return NULL;
		memcpy(res, h, lh);
		memcpy(res + lh, marker, lm);
		memcpy(res + lh + lm, t, lt);
		rlen = lh + lm + lt;
		res[rlen] = '\0';
	}
	if (!res)
		return NULL;
	if (len)
		*len = rlen;
	if (truncated)
		*truncated = trunc;
	cae__capture_clear(c);
	return res;
}

void cae__capture_clear(cae_capture *c)
{
	cae__buf_clear(&c->head);
	free(c->ring);
	c->ring = NULL;
	c->ring_len = c->ring_pos = 0;
	c->total = 0;
}
