#include "base/utf8.h"

#include "base/buf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

size_t cae__utf8_seq_len(const unsigned char *s, size_t n)
{
	if (n == 0)
		return 0;
	unsigned char c = s[0];
	if (c < 0x80)
		return 1;
	size_t len;
	unsigned int cp;
	if (c >= 0xC2 && c <= 0xDF) {
		len = 2;
		cp = c & 0x1F;
	} else if (c >= 0xE0 && c <= 0xEF) {
		len = 3;
		cp = c & 0x0F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		len = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3F);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
		return 0; /* overlong or out of range */
	if (cp >= 0xD800 && cp <= 0xDFFF)
		return 0; /* surrogate */
	return len;
}

bool cae__utf8_is_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;
	while (i < n) {
		/* Text is mostly ASCII: skip it 8 bytes at a time. */
		uint64_t w;
		if (i + 8 <= n && (memcpy(&w, p + i, 8), !(w & 0x8080808080808080ull))) {
			i += 8;
			continue;
		}
		if (p[i] < 0x80) {
			i++;
			continue;
		}
		size_t l = cae__utf8_seq_len(p + i, n - i);
		if (l == 0)
			return false;
		i += l;
	}
	return true;
}

char *cae__utf8_sanitize(const char *s, size_t n, size_t *out_len)
{
	const unsigned char *p = (const unsigned char *)s;
	/* Fast path: already valid. */
	if (cae__utf8_is_valid(s, n)) {
		char *r = cae__memdup0(s, n);
		if (!r)
			return NULL;
		if (out_len)
			*out_len = n;
		return r;
	}
	/* Worst case each byte becomes 3. */
	char *r = malloc(n * 3 + 1);
	if (!r)
		return NULL;
	size_t o = 0, i = 0;
	while (i < n) {
		size_t l = p[i] < 0x80 ? 1 : cae__utf8_seq_len(p + i, n - i);
		if (l == 0) {
			r[o++] = (char)0xEF;
			r[o++] = (char)0xBF;
			r[o++] = (char)0xBD;
			i++;
			continue;
		}
		memcpy(r + o, p + i, l);
		o += l;
		i += l;
	}
	r[o] = '\0';
	if (out_len)
		*out_len = o;
	return r;
}

static inline bool is_cont(unsigned char c)
{
	return (c & 0xC0) == 0x80;
}

size_t cae__utf8_prefix_chars(const char *s, size_t n, size_t max_chars, size_t *chars)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, c = 0;
	while (i < n && c < max_chars) {
		i++;
		while (i < n && is_cont(p[i]))
			i++;
		c++;
	}
	if (chars)
		*chars = c;
	return i;
}

size_t cae__utf8_suffix_chars(const char *s, size_t n, size_t max_chars)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = n, c = 0;
	while (i > 0 && c < max_chars) {
		i--;
		while (i > 0 && is_cont(p[i]))
			i--;
		c++;
	}
	return i;
}

size_t cae__utf8_count(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t c = 0;
	for (size_t i = 0; i < n; i++)
		if (!is_cont(p[i]))
			c++;
	return c;
}

size_t cae__utf8_floor(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	/* Look back at most 3 bytes for the start of the last sequence. */
	size_t i = n;
	size_t back = 0;
	while (i > 0 && back < 4 && is_cont(p[i - 1])) {
		i--;
		back++;
	}
	if (i == 0)
		return n;
	size_t start = i - 1;
	unsigned char c = p[start];
	size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
	if (c >= 0x80 && c < 0xC0)
		return n; /* stray continuation bytes: invalid anyway, sanitize handles them */
	if (n - start < need)
		return start; /* the last sequence is cut short */
	return n;
}

size_t cae__utf8_ceil(const char *s, size_t n, size_t off)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = off, k = 0;
	while (i < n && k < 3 && is_cont(p[i])) {
		i++;
		k++;
	}
	return i;
}

int cae__hex_digit(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}
