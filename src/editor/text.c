/* Text scanning for the editor: validity, line counting, `cat -n` numbering, CRLF
 * conversion and the whitespace-insensitive search behind the "did you mean" hint.
 * Everything here is one pass over the data, word-at-a-time where it matters: str_replace
 * on a 10 MB file must stay within a few milliseconds. */
#include "editor-internal.h"

#include "base/utf8.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__) && !defined(CAE_EDITOR_NO_SIMD)
#include <emmintrin.h>
#endif

#include "base/banned.h"

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

static inline uint64_t load64(const char *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

/* 0x80 in every byte of v that is zero, 0 elsewhere (exact, no carries between bytes). */
static inline uint64_t zero_bytes(uint64_t v)
{
	uint64_t t = (v & ~HIGHS) + ~HIGHS;
	return ~(t | v | ~HIGHS);
}

/* Checks s[i..n) for NUL bytes, invalid UTF-8 and "\r", recording them in info. Stops at the
 * first NUL or invalid sequence, and (unless final) before a non-ASCII byte with fewer than 4
 * bytes after it, whose sequence may go on past n. Returns where it stopped. */
static size_t scan_range(const char *s, size_t i, size_t n, bool final, ed_text_info *info)
{
	const uint64_t cr = ONES * (unsigned char)'\r';
	uint64_t crs = 0;
#if defined(__SSE2__) && !defined(CAE_EDITOR_NO_SIMD)
	/* 64 bytes at a time while they are ASCII without NUL; "\r" only noted. */
	const __m128i zero = _mm_setzero_si128(), crv = _mm_set1_epi8('\r');
	__m128i cracc = zero;
	while (i + 64 <= n) {
		__m128i a = _mm_loadu_si128((const __m128i *)(s + i));
		__m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
		__m128i d = _mm_loadu_si128((const __m128i *)(s + i + 48));
		__m128i hi = _mm_or_si128(_mm_or_si128(a, b), _mm_or_si128(c, d));
		__m128i z =
		    _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(a, zero), _mm_cmpeq_epi8(b, zero)),
				 _mm_or_si128(_mm_cmpeq_epi8(c, zero), _mm_cmpeq_epi8(d, zero)));
		if (_mm_movemask_epi8(_mm_or_si128(hi, z)))
			break; /* the general loop below takes over from here */
		cracc = _mm_or_si128(
		    cracc,
		    _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(a, crv), _mm_cmpeq_epi8(b, crv)),
				 _mm_or_si128(_mm_cmpeq_epi8(c, crv), _mm_cmpeq_epi8(d, crv))));
		i += 64;
	}
	if (_mm_movemask_epi8(cracc))
		info->has_cr = true;
#endif
	while (i < n) {
		/* Fast path: 32 bytes of ASCII without NUL; "\r" only noted. */
		if (i + 32 <= n) {
			uint64_t a = load64(s + i), b = load64(s + i + 8), c = load64(s + i + 16),
				 d = load64(s + i + 24);
			uint64_t bad = ((a | b | c | d) & HIGHS) | zero_bytes(a) | zero_bytes(b) |
				       zero_bytes(c) | zero_bytes(d);
			if (!bad) {
				crs |= zero_bytes(a ^ cr) | zero_bytes(b ^ cr) |
				       zero_bytes(c ^ cr) | zero_bytes(d ^ cr);
				i += 32;
				continue;
			}
		}
		unsigned char ch = (unsigned char)s[i];
		if (ch < 0x80) {
			if (ch == 0) {
				info->nul_at = i;
				break; /* binary: that is what the message says */
			}
			if (ch == '\r')
				info->has_cr = true;
			i++;
			continue;
		}
		if (!final && n - i < 4)
			break; /* the sequence may go on in the next piece */
		size_t l = cae__utf8_seq_len((const unsigned char *)s + i, n - i);
		if (l == 0) {
			info->bad_at = i;
			break;
		}
		i += l;
	}
	if (crs)
		info->has_cr = true;
	return i;
}

void cae__ed_scan_init(ed_scan *sc)
{
	sc->pos = 0;
	sc->info.nul_at = SIZE_MAX;
	sc->info.bad_at = SIZE_MAX;
	sc->info.has_cr = false;
}

void cae__ed_scan_feed(ed_scan *sc, const char *s, size_t avail, bool final)
{
	ed_text_info *info = &sc->info;
	if (info->nul_at != SIZE_MAX)
		return;
	if (info->bad_at == SIZE_MAX)
		sc->pos = scan_range(s, sc->pos, avail, final, info);
	if (final && info->bad_at != SIZE_MAX && info->nul_at == SIZE_MAX) {
		/* Binary beats "not UTF-8" in the message: look on for a NUL. */
		const char *z = memchr(s + info->bad_at, 0, avail - info->bad_at);
		if (z)
			info->nul_at = (size_t)(z - s);
	}
}

void cae__ed_text_scan(const char *s, size_t n, ed_text_info *info)
{
	ed_scan sc;
	cae__ed_scan_init(&sc);
	cae__ed_scan_feed(&sc, s, n, true);
	*info = sc.info;
}

#define VERIFY_PREFIX 32

size_t cae__ed_find(const char *hay, size_t n, size_t from, const char *needle, size_t m)
{
	if (from > n || m > n - from)
		return SIZE_MAX;
	if (m == 0)
		return from;
	if (m == 1) {
		const char *p = memchr(hay + from, needle[0], n - from);
		return p ? (size_t)(p - hay) : SIZE_MAX;
	}
	size_t i = from;
#if defined(__SSE2__) && !defined(CAE_EDITOR_NO_SIMD)
	/* 64 positions at a time: those where the needle's first and last bytes both match are
	 * candidates, verified with memcmp (the first VERIFY_PREFIX bytes, then the rest). The
	 * verification is charged to a budget that grows with the bytes passed; text full of
	 * near-misses exhausts it and memmem (linear time) takes over. */
	const __m128i F = _mm_set1_epi8(needle[0]), L = _mm_set1_epi8(needle[m - 1]);
	size_t mid = m - 2, head = mid < VERIFY_PREFIX ? mid : VERIFY_PREFIX;
	uint64_t spent = 0;
	while (n - i >= m - 1 + 64) {
		const char *p = hay + i, *q = hay + i + m - 1;
#define FL_EQ(k)                                                                                   \
	_mm_and_si128(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + (k))), F),              \
		      _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(q + (k))), L))
		__m128i e0 = FL_EQ(0), e1 = FL_EQ(16), e2 = FL_EQ(32), e3 = FL_EQ(48);
#undef FL_EQ
		if (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(e0, e1), _mm_or_si128(e2, e3)))) {
			uint64_t mask = (uint64_t)(unsigned)_mm_movemask_epi8(e0) |
					(uint64_t)(unsigned)_mm_movemask_epi8(e1) << 16 |
					(uint64_t)(unsigned)_mm_movemask_epi8(e2) << 32 |
					(uint64_t)(unsigned)_mm_movemask_epi8(e3) << 48;
			do {
				const char *c = p + __builtin_ctzll(mask) + 1;
				spent += VERIFY_PREFIX;
				if (memcmp(c, needle + 1, head) == 0) {
					spent += mid;
					if (memcmp(c + head, needle + 1 + head, mid - head) == 0)
						return (size_t)(c - 1 - hay);
				}
				mask &= mask - 1;
			} while (mask);
			if (spent > 8 * (uint64_t)(i - from) + (64u << 10))
				break;
		}
		i += 64;
	}
#endif
	const char *p = memmem(hay + i, n - i, needle, m);
	return p ? (size_t)(p - hay) : SIZE_MAX;
}

void cae__ed_search_init(ed_search *se, const char *needle, size_t m)
{
	*se = (ed_search){
	    .needle = needle,
	    .m = m,
	    .first = SIZE_MAX,
	    .second = SIZE_MAX,
	};
}

void cae__ed_search_feed(ed_search *se, const char *s, size_t avail)
{
	while (se->second == SIZE_MAX) {
		size_t x = cae__ed_find(s, avail, se->next, se->needle, se->m);
		if (x == SIZE_MAX) {
			/* None starts before avail - m + 1 (it would have ended by avail). */
			if (avail >= se->m && avail - se->m + 1 > se->next)
				se->next = avail - se->m + 1;
			break;
		}
		if (se->first == SIZE_MAX) {
			se->first = x;
			se->next = x + se->m; /* occurrences are counted without overlap */
		} else {
			se->second = x;
		}
	}
	/* Newlines before the first occurrence, counted while the text is fresh in the cache:
	 * up to where no occurrence can start any more. */
	size_t upto = se->first != SIZE_MAX ? se->first : se->next;
	if (upto > se->counted) {
		se->newlines += cae__ed_count_newlines(s + se->counted, upto - se->counted);
		se->counted = upto;
	}
}

size_t cae__ed_count_newlines(const char *s, size_t n)
{
	const uint64_t nl = ONES * (unsigned char)'\n';
	size_t count = 0, i = 0;
#if defined(__SSE2__) && !defined(CAE_EDITOR_NO_SIMD)
	const __m128i nlv = _mm_set1_epi8('\n'), zero = _mm_setzero_si128();
	while (i + 16 <= n) {
		/* Per-byte counters for at most 255 blocks, then summed. */
		__m128i acc = zero;
		size_t blocks = (n - i) / 16;
		if (blocks > 255)
			blocks = 255;
		for (size_t b = 0; b < blocks; b++, i += 16)
			acc = _mm_sub_epi8(
			    acc, _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(s + i)), nlv));
		__m128i sad = _mm_sad_epu8(acc, zero);
		count += (size_t)_mm_cvtsi128_si32(sad) + (size_t)_mm_extract_epi16(sad, 4);
	}
#endif
	/* Per-byte counters (0x80 steps >> 7 = 1 each), summed before any byte can overflow. */
	while (i + 8 <= n) {
		uint64_t acc = 0;
		size_t end = n - i >= 255 * 8 ? i + 255 * 8 : i + (n - i) / 8 * 8;
		for (; i < end; i += 8)
			acc += zero_bytes(load64(s + i) ^ nl) >> 7;
		uint64_t pairs =
		    (acc & 0x00ff00ff00ff00ffULL) + ((acc >> 8) & 0x00ff00ff00ff00ffULL);
		count += (size_t)((pairs * 0x0001000100010001ULL) >> 48);
	}
	for (; i < n; i++)
		count += s[i] == '\n';
	return count;
}

size_t cae__ed_count_lines(const char *s, size_t n)
{
	if (n == 0)
		return 0;
	return cae__ed_count_newlines(s, n) + (s[n - 1] != '\n');
}

size_t cae__ed_skip_lines(const char *s, size_t n, size_t from, size_t count)
{
	size_t off = from;
	while (count > 0 && off < n) {
		const char *nl = memchr(s + off, '\n', n - off);
		if (!nl)
			return n;
		off = (size_t)(nl - s) + 1;
		count--;
	}
	return off;
}

size_t cae__ed_line_offset(const char *s, size_t n, size_t idx)
{
	return cae__ed_skip_lines(s, n, 0, idx);
}

size_t cae__ed_back_lines(const char *s, size_t off, size_t back)
{
	/* Start of the line holding off. */
	size_t p = off;
	while (p > 0 && s[p - 1] != '\n')
		p--;
	while (back > 0 && p > 0) {
		p--; /* onto the "\n" ending the previous line */
		while (p > 0 && s[p - 1] != '\n')
			p--;
		back--;
	}
	return p;
}

bool cae__ed_is_crlf(const char *s, size_t n)
{
	const char *p = s, *end = s + n;
	bool any = false;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			break;
		if (nl == s || nl[-1] != '\r')
			return false;
		any = true;
		p = nl + 1;
	}
	return any;
}

char *cae__ed_crlf_to_lf(const char *s, size_t n, size_t *out_len)
{
	char *r = malloc(n + 1);
	if (!r)
		return NULL;
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\r' && i + 1 < n && s[i + 1] == '\n')
			continue;
		r[o++] = s[i];
	}
	r[o] = '\0';
	*out_len = o;
	return r;
}

int cae__ed_lf_to_crlf(cae_buf *out, const char *s, size_t n)
{
	const char *p = s, *end = s + n;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t seg = nl ? (size_t)(nl - p) : (size_t)(end - p);
		int r = cae__buf_append(out, p, seg);
		if (r < 0)
			return r;
		if (!nl)
			break;
		r = cae__buf_append(out, "\r\n", 2);
		if (r < 0)
			return r;
		p = nl + 1;
	}
	return out->truncated ? -EFBIG : 0;
}

size_t cae__ed_count_chars(const char *s, size_t n)
{
	/* Characters = bytes - continuation bytes (10xxxxxx), a word at a time. */
	size_t cont = 0, i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t v = load64(s + i);
		uint64_t m = (v & ~(v << 1)) & HIGHS; /* bit 7 set, bit 6 clear */
		cont += (size_t)(((m >> 7) * ONES) >> 56);
	}
	for (; i < n; i++)
		cont += ((unsigned char)s[i] & 0xC0) == 0x80;
	return n - cont;
}

/* "%6zu\t" without printf: the line-number prefix written once per line. */
static size_t format_number(char *buf, size_t no)
{
	char digits[24];
	size_t d = 0;
	do {
		digits[d++] = (char)('0' + no % 10);
		no /= 10;
	} while (no);
	size_t o = 0;
	for (size_t pad = d; pad < 6; pad++)
		buf[o++] = ' ';
	while (d)
		buf[o++] = digits[--d];
	buf[o++] = '\t';
	return o;
}

int cae__ed_number_lines(cae_buf *out, const char *s, size_t n, size_t first_no, size_t max_chars,
			 bool strip_cr, ed_numbered *res)
{
	memset(res, 0, sizeof(*res));
	size_t used = 0, off = 0, no = first_no;
	/* One allocation for the usual case: the text plus a prefix per short line. */
	size_t guess = n < max_chars * 4 ? n : max_chars * 4;
	int rr = cae__buf_reserve(out, guess + guess / 4 + 64);
	if (rr < 0)
		return rr;
	while (off < n) {
		const char *nl = memchr(s + off, '\n', n - off);
		size_t end = nl ? (size_t)(nl - s) : n;
		size_t next = nl ? end + 1 : n;
		size_t len = end - off;
		if (strip_cr && len > 0 && s[end - 1] == '\r')
			len--;
		char prefix[32];
		size_t plen = format_number(prefix, no);
		size_t chars = plen + cae__ed_count_chars(s + off, len) + 1;
		if (used + chars > max_chars) {
			res->clipped = true;
			if (res->lines_shown > 0)
				return 0;
			/* A first line longer than the whole budget: show its beginning. */
			size_t room = max_chars > plen + 1 ? max_chars - plen - 1 : 0;
			size_t keep = cae__utf8_prefix_chars(s + off, len, room, NULL);
			int r = cae__buf_append(out, prefix, plen);
			if (r == 0)
				r = cae__buf_append(out, s + off, keep);
			if (r == 0)
				r = cae__buf_append(out, "\n", 1);
			res->lines_shown = 1;
			res->line_cut = true;
			return r;
		}
		int r = cae__buf_append(out, prefix, plen);
		if (r == 0)
			r = cae__buf_append(out, s + off, len);
		if (r == 0)
			r = cae__buf_append(out, "\n", 1);
		if (r < 0)
			return r;
		used += chars;
		res->lines_shown++;
		no++;
		off = next;
	}
	return 0;
}

static inline bool is_ws(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

size_t cae__ed_ws_find(const char *hay, size_t n, const char *needle, size_t m, ed_ws_match *out,
		       size_t max_out, bool *gave_up)
{
	*gave_up = false;
	char *key = malloc(m + 1);
	if (!key)
		return 0;
	size_t k = 0;
	for (size_t i = 0; i < m; i++)
		if (!is_ws((unsigned char)needle[i]))
			key[k++] = needle[i];
	if (k == 0) {
		free(key);
		return 0;
	}
	/* Bounded effort: this only runs on the error path, but the inputs are the agent's. */
	uint64_t budget = 256ULL << 20;
	size_t found = 0, pos = 0, line = 1, counted_to = 0;
	while (pos < n) {
		const char *c = memchr(hay + pos, key[0], n - pos);
		if (!c)
			break;
		size_t i = (size_t)(c - hay), p = i + 1, j = 1;
		while (j < k) {
			while (p < n && is_ws((unsigned char)hay[p]))
				p++;
			if (p == n || hay[p] != key[j])
				break;
			p++;
			j++;
		}
		uint64_t cost = (uint64_t)(p - i) + 1;
		if (cost >= budget) {
			*gave_up = true;
			break;
		}
		budget -= cost;
		if (j < k) {
			pos = i + 1;
			continue;
		}
		line += cae__ed_count_newlines(hay + counted_to, i - counted_to);
		counted_to = i;
		if (found < max_out) {
			out[found].first_line = line;
			out[found].last_line = line + cae__ed_count_newlines(hay + i, p - i);
		}
		found++;
		pos = p;
	}
	free(key);
	return found;
}
