/* Unit tests of the editor's text layer (src/editor/text.c) against plain byte-by-byte
 * reference implementations, on random buffers of every small length and alignment. Built
 * twice: with the SSE2 fast paths and with CAE_EDITOR_NO_SIMD (the portable word-at-a-time
 * code used on other architectures). */
#include "base/utf8.h"
#include "editor/editor-internal.h"
#include "testutil.h"

#include <stdint.h>

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static unsigned rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (unsigned)(rng >> 11);
}

/* Text-like random bytes: mostly ASCII with newlines, some CR, UTF-8 and, rarely, junk. */
static void fill(char *b, size_t n, int mode)
{
	static const char *utf8[] = {"\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x98\x80"};
	size_t i = 0;
	while (i < n) {
		unsigned r = rnd() % 100;
		if (r < 8)
			b[i++] = '\n';
		else if (r < 10 && mode >= 1)
			b[i++] = '\r';
		else if (r < 12 && mode >= 1) {
			const char *u = utf8[rnd() % 3];
			size_t l = strlen(u);
			if (i + l > n)
				continue;
			memcpy(b + i, u, l);
			i += l;
		} else if (r < 13 && mode >= 2)
			b[i++] = (char)(0x80 + rnd() % 0x80); /* a stray continuation/lead byte */
		else if (r == 13 && mode >= 3)
			b[i++] = '\0';
		else
			b[i++] = (char)(' ' + rnd() % 94);
	}
}

static size_t ref_newlines(const char *s, size_t n)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++)
		c += s[i] == '\n';
	return c;
}

static void ref_scan(const char *s, size_t n, ed_text_info *info)
{
	info->nul_at = SIZE_MAX;
	info->bad_at = SIZE_MAX;
	info->has_cr = false;
	const char *z = memchr(s, 0, n);
	size_t i = 0;
	while (i < n) {
		unsigned char c = (unsigned char)s[i];
		if (c == 0)
			break;
		if (c == '\r')
			info->has_cr = true;
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t l = cae__utf8_seq_len((const unsigned char *)s + i, n - i);
		if (!l) {
			info->bad_at = i;
			break;
		}
		i += l;
	}
	if (z)
		info->nul_at = (size_t)(z - s);
}

START_TEST(scan_and_count_match_reference)
{
	char *buf = malloc(4096 + 64);
	for (int round = 0; round < 4000; round++) {
		size_t n = round < 600 ? (size_t)(round % 300) : rnd() % 4096;
		size_t align = rnd() % 16;
		char *b = buf + align;
		fill(b, n, round % 4);
		ck_assert_uint_eq(cae__ed_count_newlines(b, n), ref_newlines(b, n));
		ed_text_info got, want;
		cae__ed_text_scan(b, n, &got);
		ref_scan(b, n, &want);
		ck_assert_uint_eq(got.nul_at, want.nul_at);
		if (want.nul_at == SIZE_MAX) {
			/* bad_at is only meaningful for text without NUL; has_cr only for valid. */
			ck_assert_uint_eq(got.bad_at, want.bad_at);
			if (want.bad_at == SIZE_MAX) {
				ck_assert_msg(got.has_cr == want.has_cr, "has_cr n=%zu round %d", n,
					      round);
				ck_assert_uint_eq(cae__ed_count_chars(b, n), cae__utf8_count(b, n));
			}
		}
	}
	free(buf);
}
END_TEST

START_TEST(long_buffers)
{
	/* Past the 255-block accumulators of the newline counter. */
	size_t n = 1 << 20;
	char *b = malloc(n);
	memset(b, '\n', n);
	ck_assert_uint_eq(cae__ed_count_newlines(b, n), n);
	ck_assert_uint_eq(cae__ed_count_lines(b, n), n);
	memset(b, 'x', n);
	b[n - 1] = '\r';
	ed_text_info info;
	cae__ed_text_scan(b, n, &info);
	ck_assert(info.has_cr);
	ck_assert_uint_eq(info.nul_at, SIZE_MAX);
	b[n - 1] = '\xff';
	cae__ed_text_scan(b, n, &info);
	ck_assert_uint_eq(info.bad_at, n - 1);
	b[5] = '\0';
	cae__ed_text_scan(b, n, &info);
	ck_assert_uint_eq(info.nul_at, 5);
	free(b);
}
END_TEST

/* memmem with a starting offset: the reference for cae__ed_find. */
static size_t ref_find(const char *h, size_t n, size_t from, const char *nd, size_t m)
{
	if (from > n)
		return SIZE_MAX;
	const char *p = memmem(h + from, n - from, nd, m);
	return p ? (size_t)(p - h) : SIZE_MAX;
}

START_TEST(find_matches_memmem)
{
	char *buf = malloc(8192 + 64);
	char needle[300];
	for (int round = 0; round < 20000; round++) {
		size_t n = round < 2000 ? (size_t)(round % 200) : rnd() % 8192;
		char *b = buf + rnd() % 16;
		/* A small alphabet makes candidates (first and last byte equal) frequent. */
		unsigned alpha = 2 + rnd() % (round % 3 ? 4 : 90);
		for (size_t i = 0; i < n; i++)
			b[i] = (char)('a' + rnd() % alpha);
		size_t m = 1 + rnd() % (round % 5 ? 12 : 280);
		if (n > 0 && rnd() % 2) {
			/* A needle taken from the text: found at least once. */
			size_t at = rnd() % n;
			if (m > n - at)
				m = n - at;
			memcpy(needle, b + at, m);
		} else {
			for (size_t i = 0; i < m; i++)
				needle[i] = (char)('a' + rnd() % alpha);
		}
		size_t from = n ? rnd() % (n + 2) : rnd() % 2;
		ck_assert_msg(cae__ed_find(b, n, from, needle, m) ==
				  ref_find(b, n, from, needle, m),
			      "round %d n=%zu m=%zu from=%zu", round, n, m, from);
	}
	/* Near-misses everywhere: "aaa...aba...a" in a text of "a" (the memmem fallback), then
	 * the needle itself at the very end. */
	size_t n = 1 << 20;
	char *h = malloc(n);
	memset(h, 'a', n);
	memset(needle, 'a', 100);
	needle[50] = 'b';
	ck_assert_uint_eq(cae__ed_find(h, n, 0, needle, 100), SIZE_MAX);
	memcpy(h + n - 100, needle, 100);
	ck_assert_uint_eq(cae__ed_find(h, n, 0, needle, 100), n - 100);
	ck_assert_uint_eq(cae__ed_find(h, n, 7, needle, 100), n - 100);
	ck_assert_uint_eq(cae__ed_find(h, n, n - 99, needle, 100), SIZE_MAX);
	ck_assert_uint_eq(cae__ed_find(h, n, n + 1, needle, 1), SIZE_MAX);
	free(h);
	free(buf);
}
END_TEST

START_TEST(scan_in_pieces)
{
	/* Fed piece by piece (as a file is read), the scan says what one scan of the whole says. */
	char *buf = malloc(20000);
	for (int round = 0; round < 3000; round++) {
		size_t n = rnd() % (round % 2 ? 2000 : 20000);
		fill(buf, n, round % 4);
		if (round % 4 == 1 && n > 0)
			buf[rnd() % n] = (char)0xe6; /* a lead byte, maybe cut by a piece */
		ed_text_info want;
		cae__ed_text_scan(buf, n, &want);
		ed_scan sc;
		cae__ed_scan_init(&sc);
		size_t avail = 0;
		while (avail < n) {
			size_t step = 1 + rnd() % (round % 2 ? 7 : 3000);
			avail = step > n - avail ? n : avail + step;
			cae__ed_scan_feed(&sc, buf, avail, false);
		}
		cae__ed_scan_feed(&sc, buf, n, true);
		ck_assert_uint_eq(sc.info.nul_at, want.nul_at);
		if (want.nul_at == SIZE_MAX) {
			ck_assert_uint_eq(sc.info.bad_at, want.bad_at);
			if (want.bad_at == SIZE_MAX)
				ck_assert(sc.info.has_cr == want.has_cr);
		}
	}
	free(buf);
}
END_TEST

START_TEST(search_in_pieces)
{
	/* The first occurrence, the next one that does not overlap it, and the newlines before
	 * the first, found piece by piece, against memmem and a byte count. */
	char *buf = malloc(20000);
	static const char *needles[] = {"ab", "aba",	"x\ny",
					"\n", "needle", "zzzzzzzzzzzzzzzzzzzz"};
	for (int round = 0; round < 3000; round++) {
		size_t n = rnd() % (round % 2 ? 2000 : 20000);
		for (size_t i = 0; i < n; i++) {
			unsigned r = rnd() % 16;
			buf[i] = r == 0 ? '\n' : (char)("abxyz"[r % 5]);
		}
		const char *nd = needles[round % 6];
		size_t m = strlen(nd);
		for (unsigned k = rnd() % 4; k > 0 && n >= m; k--)
			memcpy(buf + rnd() % (n - m + 1), nd, m);
		size_t first = ref_find(buf, n, 0, nd, m);
		size_t second = first == SIZE_MAX ? SIZE_MAX : ref_find(buf, n, first + m, nd, m);
		ed_search se;
		cae__ed_search_init(&se, nd, m);
		size_t avail = 0;
		do {
			size_t step = 1 + rnd() % (round % 2 ? 5 : 4000);
			avail = step > n - avail ? n : avail + step;
			cae__ed_search_feed(&se, buf, avail);
		} while (avail < n);
		ck_assert_uint_eq(se.first, first);
		ck_assert_uint_eq(se.second, second);
		if (first != SIZE_MAX)
			ck_assert_uint_eq(se.newlines, ref_newlines(buf, first));
	}
	/* Overlapping occurrences are one: "aaa" holds "aa" once (then "a" is left). */
	ed_search se;
	cae__ed_search_init(&se, "aa", 2);
	cae__ed_search_feed(&se, "aaa", 3);
	ck_assert_uint_eq(se.first, 0);
	ck_assert_uint_eq(se.second, SIZE_MAX);
	cae__ed_search_init(&se, "aa", 2);
	cae__ed_search_feed(&se, "aaaa", 4);
	ck_assert_uint_eq(se.second, 2);
	free(buf);
}
END_TEST

START_TEST(lines_and_offsets)
{
	const char *s = "a\nbb\n\nccc";
	size_t n = strlen(s);
	ck_assert_uint_eq(cae__ed_count_lines(s, n), 4);
	ck_assert_uint_eq(cae__ed_count_lines("a\n", 2), 1);
	ck_assert_uint_eq(cae__ed_count_lines("", 0), 0);
	ck_assert_uint_eq(cae__ed_line_offset(s, n, 0), 0);
	ck_assert_uint_eq(cae__ed_line_offset(s, n, 1), 2);
	ck_assert_uint_eq(cae__ed_line_offset(s, n, 3), 6);
	ck_assert_uint_eq(cae__ed_line_offset(s, n, 9), n);
	ck_assert_uint_eq(cae__ed_skip_lines(s, n, 2, 2), 6);
	ck_assert_uint_eq(cae__ed_back_lines(s, 7, 0), 6);
	ck_assert_uint_eq(cae__ed_back_lines(s, 7, 2), 2);
	ck_assert_uint_eq(cae__ed_back_lines(s, 7, 9), 0);
	ck_assert(cae__ed_is_crlf("a\r\nb\r\n", 6));
	ck_assert(!cae__ed_is_crlf("a\r\nb\n", 5));
	ck_assert(!cae__ed_is_crlf("ab", 2));
	size_t l;
	char *lf = cae__ed_crlf_to_lf("a\r\nb\rc\r\n", 8, &l);
	ck_assert_str_eq(lf, "a\nb\rc\n");
	cae_buf out;
	cae__buf_init(&out, 1024);
	ck_assert_int_eq(cae__ed_lf_to_crlf(&out, lf, l), 0);
	ck_assert_str_eq(out.data, "a\r\nb\rc\r\n");
	cae__buf_clear(&out);
	free(lf);
}
END_TEST

START_TEST(numbering_and_clipping)
{
	cae_buf out;
	cae__buf_init(&out, 1 << 20);
	ed_numbered nb;
	ck_assert_int_eq(cae__ed_number_lines(&out, "x\n\ty\r\nz", 7, 1, 1000, true, &nb), 0);
	ck_assert_str_eq(out.data, "     1\tx\n     2\t\ty\n     3\tz\n");
	ck_assert(!nb.clipped);
	ck_assert_uint_eq(nb.lines_shown, 3);
	cae__buf_clear(&out);
	/* Wide numbers are not cut. */
	ck_assert_int_eq(cae__ed_number_lines(&out, "a\n", 2, 1234567, 1000, false, &nb), 0);
	ck_assert_str_eq(out.data, "1234567\ta\n");
	cae__buf_clear(&out);
	/* Clipping counts characters, not bytes, and stops at whole lines. */
	ck_assert_int_eq(
	    cae__ed_number_lines(&out, "\xc3\xa9\xc3\xa9\nbb\ncc\n", 11, 1, 20, false, &nb), 0);
	ck_assert_str_eq(out.data, "     1\t\xc3\xa9\xc3\xa9\n     2\tbb\n");
	ck_assert(nb.clipped);
	ck_assert_uint_eq(nb.lines_shown, 2);
	cae__buf_clear(&out);
	/* A first line longer than the budget is cut at a character boundary. */
	ck_assert_int_eq(cae__ed_number_lines(&out, "\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5", 9, 1,
					      10, false, &nb),
			 0);
	ck_assert_str_eq(out.data, "     1\t\xe6\x97\xa5\xe6\x97\xa5\n");
	ck_assert(nb.line_cut);
	cae__buf_clear(&out);
}
END_TEST

START_TEST(whitespace_insensitive_find)
{
	const char *hay = "def f():\n\tif x:\n\t\treturn 1\nif x:\n    return 1\n";
	ed_ws_match m[4];
	bool gave_up;
	ck_assert_uint_eq(
	    cae__ed_ws_find(hay, strlen(hay), "if x:\n  return 1", 16, m, 4, &gave_up), 2);
	ck_assert_uint_eq(m[0].first_line, 2);
	ck_assert_uint_eq(m[0].last_line, 3);
	ck_assert_uint_eq(m[1].first_line, 4);
	ck_assert_uint_eq(m[1].last_line, 5);
	ck_assert(!gave_up);
	ck_assert_uint_eq(cae__ed_ws_find(hay, strlen(hay), " \t\n", 3, m, 4, &gave_up), 0);
	ck_assert_uint_eq(cae__ed_ws_find(hay, strlen(hay), "return 2", 8, m, 4, &gave_up), 0);
	/* More matches than slots: counted, not written past the end. */
	ck_assert_uint_eq(cae__ed_ws_find("a a a a a a", 11, "a", 1, m, 4, &gave_up), 6);
}
END_TEST

START_TEST(path_forms)
{
	char *rel = NULL;
	ck_assert_int_eq(cae__ed_path_to_rel("/w/p", "/w/p/a//./b/", 12, &rel), ED_PATH_OK);
	ck_assert_str_eq(rel, "a/b");
	free(rel);
	ck_assert_int_eq(cae__ed_path_to_rel("/w/p", "x/../y", 6, &rel), ED_PATH_OK);
	ck_assert_str_eq(rel, "x/../y"); /* ".." is left to openat2 */
	free(rel);
	ck_assert_int_eq(cae__ed_path_to_rel("/w/p", "/w/p", 4, &rel), ED_PATH_OK);
	ck_assert_str_eq(rel, "");
	free(rel);
	ck_assert_int_eq(cae__ed_path_to_rel("/w/p", "/w/px/a", 7, &rel), ED_PATH_OUTSIDE);
	ck_assert_int_eq(cae__ed_path_to_rel("/w/p", "/w/../w/p/a", 11, &rel), ED_PATH_OUTSIDE);
	ck_assert_int_eq(cae__ed_path_to_rel("/w/p", "", 0, &rel), ED_PATH_EMPTY);
	ck_assert_int_eq(cae__ed_path_to_rel("/w/p", "a\0b", 3, &rel), ED_PATH_NUL);
	ck_assert_int_eq(cae__ed_path_to_rel("/w/p", "\xff", 1, &rel), ED_PATH_NOT_UTF8);
	ck_assert_int_eq(cae__ed_path_to_rel("/", "/etc/x", 6, &rel), ED_PATH_OK);
	ck_assert_str_eq(rel, "etc/x");
	free(rel);
	char *root = cae__ed_path_root_normalize("/a/./b//../c/");
	ck_assert_str_eq(root, "/a/c");
	free(root);
	ck_assert_ptr_null(cae__ed_path_root_normalize("rel"));
	char *d = cae__ed_path_display("/", "x");
	ck_assert_str_eq(d, "/x");
	free(d);
}
END_TEST

START_TEST(undo_history_bounds)
{
	ed_undo *u = cae__ed_undo_new(2, 1000);
	ck_assert_int_eq(cae__ed_undo_push(u, "k", strdup("one"), 3, true, 0), 1);
	ck_assert_int_eq(cae__ed_undo_push(u, "k", strdup("two"), 3, true, 0), 1);
	ck_assert_int_eq(cae__ed_undo_push(u, "k", strdup("three"), 5, true, 42),
			 1); /* drops "one" */
	char *data;
	size_t len;
	bool existed;
	uint64_t written;
	ck_assert_int_eq(cae__ed_undo_pop(u, "k", &data, &len, &existed, &written), 1);
	ck_assert_str_eq(data, "three");
	ck_assert_uint_eq(written, 42);
	free(data);
	ck_assert_int_eq(cae__ed_undo_pop(u, "k", &data, &len, &existed, &written), 1);
	ck_assert_str_eq(data, "two");
	free(data);
	ck_assert_int_eq(cae__ed_undo_pop(u, "k", &data, &len, &existed, &written), 0);
	ck_assert_uint_eq(cae__ed_undo_bytes(u), 0);
	/* Larger than the budget: not kept. */
	char *big = malloc(2000);
	memset(big, 'x', 2000);
	ck_assert_int_eq(cae__ed_undo_push(u, "k", big, 2000, true, 0), 0);
	ck_assert_uint_eq(cae__ed_undo_bytes(u), 0);
	/* Many files: the total stays under the budget, the newest survive. */
	for (int i = 0; i < 100; i++) {
		char key[16];
		snprintf(key, sizeof(key), "f%d", i);
		ck_assert_int_ge(cae__ed_undo_push(u, key, strdup("0123456789"), 10, true, 0), 0);
		ck_assert_uint_le(cae__ed_undo_bytes(u), 1000);
	}
	ck_assert_int_eq(cae__ed_undo_pop(u, "f0", &data, &len, &existed, &written), 0);
	ck_assert_int_eq(cae__ed_undo_pop(u, "f99", &data, &len, &existed, &written), 1);
	free(data);
	cae__ed_undo_free(u);
	cae__ed_undo_free(NULL);
}
END_TEST

START_TEST(hash_split_invariant)
{
	/* The same bytes give the same hash however they are fed; a change gives another. */
	char text[300];
	for (size_t i = 0; i < sizeof(text); i++)
		text[i] = (char)('a' + (i * 7) % 26);
	ed_hash whole;
	cae__ed_hash_init(&whole);
	cae__ed_hash_feed(&whole, text, sizeof(text));
	uint64_t h = cae__ed_hash_final(&whole);
	for (size_t a = 0; a < 20; a++)
		for (size_t b = a; b < 40; b += 3) {
			ed_hash hs;
			cae__ed_hash_init(&hs);
			cae__ed_hash_feed(&hs, text, a);
			cae__ed_hash_feed(&hs, text + a, b - a);
			cae__ed_hash_feed(&hs, text + b, sizeof(text) - b);
			ck_assert_uint_eq(cae__ed_hash_final(&hs), h);
		}
	text[150] ^= 1;
	cae__ed_hash_init(&whole);
	cae__ed_hash_feed(&whole, text, sizeof(text));
	ck_assert_uint_ne(cae__ed_hash_final(&whole), h);
	/* length matters: "" and "\0" differ */
	ed_hash e0, e1;
	cae__ed_hash_init(&e0);
	cae__ed_hash_init(&e1);
	cae__ed_hash_feed(&e1, "", 1);
	ck_assert_uint_ne(cae__ed_hash_final(&e0), cae__ed_hash_final(&e1));
}
END_TEST

static char *released[8];
static size_t nreleased;

static void release_cb(void *ctx, char *data)
{
	ck_assert_ptr_eq(ctx, &nreleased);
	ck_assert_uint_lt(nreleased, 8);
	released[nreleased++] = data;
}

START_TEST(undo_release_hook)
{
	/* What the history lets go of goes to the hook (which owns it), not to free(). */
	ed_undo *u = cae__ed_undo_new(2, 1000);
	cae__ed_undo_set_release(u, release_cb, &nreleased);
	ck_assert_int_eq(cae__ed_undo_push(u, "k", strdup("one"), 3, true, 0), 1);
	ck_assert_int_eq(cae__ed_undo_push(u, "k", strdup("two"), 3, true, 0), 1);
	ck_assert_uint_eq(nreleased, 0);
	ck_assert_int_eq(cae__ed_undo_push(u, "k", strdup("three"), 5, true, 0), 1); /* depth */
	ck_assert_uint_eq(nreleased, 1);
	ck_assert_str_eq(released[0], "one");
	char *big = malloc(2000);
	memset(big, 'x', 2000);
	ck_assert_int_eq(cae__ed_undo_push(u, "k", big, 2000, true, 0), 0); /* over the budget */
	ck_assert_uint_eq(nreleased, 2);
	ck_assert_ptr_eq(released[1], big);
	char *b900 = calloc(1, 900);
	ck_assert_int_eq(cae__ed_undo_push(u, "j", b900, 800, true, 0), 1); /* evicts by budget */
	ck_assert_uint_ge(nreleased, 3);
	ck_assert_str_eq(released[2], "two");
	ck_assert_int_eq(cae__ed_undo_push(u, "new", NULL, 0, false, 0), 1);
	for (size_t i = 0; i < nreleased; i++)
		free(released[i]);
	cae__ed_undo_free(u); /* what is still kept is freed */
}
END_TEST

int main(void)
{
	Suite *s = suite_create("editor-text");
	TCase *tc = tcase_create("text");
	tcase_set_timeout(tc, 60); /* the randomised tests under ASan on a busy machine */
	tcase_add_test(tc, scan_and_count_match_reference);
	tcase_add_test(tc, long_buffers);
	tcase_add_test(tc, find_matches_memmem);
	tcase_add_test(tc, scan_in_pieces);
	tcase_add_test(tc, search_in_pieces);
	tcase_add_test(tc, lines_and_offsets);
	tcase_add_test(tc, numbering_and_clipping);
	tcase_add_test(tc, whitespace_insensitive_find);
	tcase_add_test(tc, path_forms);
	tcase_add_test(tc, undo_history_bounds);
	tcase_add_test(tc, undo_release_hook);
	tcase_add_test(tc, hash_split_invariant);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
