/* JSON-RPC 2.0 framing, parsing, validation and encoding. */
#include "cae/jsonrpc.h"
#include "testutil.h"
#include "base/macro.h"
#include "jsonrpc/jsonrpc-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>

#define MIN_STEP(a, b) ((a) < (b) ? (a) : (b))

/* Feeds all of s (in pieces of `step` bytes) and collects the lines and oversize reports
 * into out as "L:<line>|" and "BIG|". */
static void run_framer(cae_jsonrpc_framer *f, const char *s, size_t step, char *out, size_t cap,
		       bool finish)
{
	size_t n = strlen(s), off = 0;
	out[0] = '\0';
	for (;;) {
		const char *line;
		size_t len;
		int r;
		while ((r = cae_jsonrpc_framer_next(f, &line, &len)) != 0) {
			size_t o = strlen(out);
			if (r == 1) {
				ck_assert_uint_eq(strlen(line), len);
				snprintf(out + o, cap - o, "L:%s|", line);
			} else {
				ck_assert_int_eq(r, -E2BIG);
				snprintf(out + o, cap - o, "BIG|");
			}
		}
		if (off == n)
			break;
		size_t k = MIN_STEP(step, n - off);
		long took = cae_jsonrpc_framer_feed(f, s + off, k);
		ck_assert_int_gt(took, 0);
		off += (size_t)took;
	}
	if (finish) {
		const char *line;
		size_t len;
		int r;
		while ((r = cae_jsonrpc_framer_finish(f, &line, &len)) != 0) {
			size_t o = strlen(out);
			snprintf(out + o, cap - o, r == 1 ? "END:%s|" : "ENDBIG|",
				 r == 1 ? line : "");
		}
	}
}

START_TEST(framer_lines_in_pieces)
{
	static const char input[] = "{\"a\":1}\n\n  \r\n{\"b\":2}\r\n{\"c\":3}\n{\"partial\"";
	char out[512];
	for (size_t step = 1; step <= sizeof(input); step++) {
		cae_jsonrpc_framer *f = cae_jsonrpc_framer_new(100);
		run_framer(f, input, step, out, sizeof(out), true);
		ck_assert_str_eq(out, "L:{\"a\":1}|L:{\"b\":2}|L:{\"c\":3}|END:{\"partial\"|");
		cae_jsonrpc_framer_free(f);
	}
}
END_TEST

START_TEST(framer_oversized_line_is_dropped_and_stream_continues)
{
	char input[4096];
	char big[1000];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	snprintf(input, sizeof(input), "{\"ok\":1}\n%s\n{\"ok\":2}\n%s", big, big);
	char out[512];
	for (size_t step = 1; step <= 2048; step *= 2) {
		cae_jsonrpc_framer *f = cae_jsonrpc_framer_new(64);
		run_framer(f, input, step, out, sizeof(out), true);
		/* One report per oversized line, however it was cut; the trailing oversized
		 * line without a newline is reported too. */
		ck_assert_msg(strcmp(out, "L:{\"ok\":1}|BIG|L:{\"ok\":2}|BIG|") == 0 ||
				  strcmp(out, "L:{\"ok\":1}|BIG|L:{\"ok\":2}|ENDBIG|") == 0,
			      "step %zu: %s", step, out);
		cae_jsonrpc_framer_free(f);
	}
}
END_TEST

START_TEST(framer_exact_limit)
{
	cae_jsonrpc_framer *f = cae_jsonrpc_framer_new(5);
	char out[256];
	run_framer(f, "12345\n123456\nabc\n", 3, out, sizeof(out), true);
	ck_assert_str_eq(out, "L:12345|BIG|L:abc|");
	cae_jsonrpc_framer_free(f);
}
END_TEST

START_TEST(framer_feed_is_bounded)
{
	/* Without draining, feed takes only what fits under the bound. */
	cae_jsonrpc_framer *f = cae_jsonrpc_framer_new(16);
	size_t n = 1 << 20;
	char *junk = malloc(n);
	memset(junk, 'y', n);
	long took = cae_jsonrpc_framer_feed(f, junk, n);
	ck_assert_int_gt(took, 0);
	ck_assert_int_lt(took, 128 << 10);
	ck_assert_int_eq(cae_jsonrpc_framer_feed(f, junk, n), 0);
	const char *line;
	size_t len;
	/* the oversized line is skipped as it comes and reported at its end */
	ck_assert_int_eq(cae_jsonrpc_framer_next(f, &line, &len), 0);
	ck_assert_int_gt(cae_jsonrpc_framer_feed(f, junk, n), 0);
	ck_assert_int_eq(cae_jsonrpc_framer_next(f, &line, &len), 0);
	ck_assert_int_gt(cae_jsonrpc_framer_feed(f, "yy\n{}\n", 6), 0);
	ck_assert_int_eq(cae_jsonrpc_framer_next(f, &line, &len), -E2BIG);
	ck_assert_ptr_null(cae_jsonrpc_framer_dropped_id(f));
	ck_assert_int_eq(cae_jsonrpc_framer_next(f, &line, &len), 1);
	ck_assert_str_eq(line, "{}");
	free(junk);
	cae_jsonrpc_framer_free(f);
}
END_TEST

START_TEST(framer_reads_fd)
{
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	const char *msgs = "{\"x\":1}\n{\"y\":2}\n";
	ck_assert_int_eq(write(p[1], msgs, strlen(msgs)), (ssize_t)strlen(msgs));
	close(p[1]);
	cae_jsonrpc_framer *f = cae_jsonrpc_framer_new(0);
	int lines = 0;
	for (;;) {
		const char *line;
		size_t len;
		int r;
		while ((r = cae_jsonrpc_framer_next(f, &line, &len)) == 1)
			lines++;
		long n = cae_jsonrpc_framer_read(f, p[0]);
		ck_assert_int_ge(n, 0);
		if (n == 0)
			break;
	}
	ck_assert_int_eq(lines, 2);
	close(p[0]);
	cae_jsonrpc_framer_free(f);
}
END_TEST

static int parse_code(const char *s, unsigned depth)
{
	json_t *v = NULL;
	cae_jsonrpc_err e = {0};
	int r = cae_jsonrpc_parse(s, strlen(s), depth, &v, &e);
	if (r == 0) {
		ck_assert_ptr_nonnull(v);
		json_decref(v);
		return 0;
	}
	ck_assert_int_eq(r, -EINVAL);
	ck_assert_ptr_null(v);
	ck_assert(e.message[0] != '\0');
	return e.code;
}

START_TEST(parse_garbage_truncated_and_deep)
{
	ck_assert_int_eq(parse_code("{\"jsonrpc\":\"2.0\"}", 0), 0);
	ck_assert_int_eq(parse_code("[{}, {}]", 0), 0);
	ck_assert_int_eq(parse_code("hello", 0), CAE_JSONRPC_PARSE_ERROR);
	ck_assert_int_eq(parse_code("\x01\xff\xfe", 0), CAE_JSONRPC_PARSE_ERROR);
	ck_assert_int_eq(parse_code("{\"jsonrpc\":\"2.0\",\"method\":\"pi", 0),
			 CAE_JSONRPC_PARSE_ERROR);
	ck_assert_int_eq(parse_code("{\"a\":1} trailing", 0), CAE_JSONRPC_PARSE_ERROR);
	ck_assert_int_eq(parse_code("{\"a\":1,\"a\":2}", 0), CAE_JSONRPC_PARSE_ERROR);
	ck_assert_int_eq(parse_code("\"just a string\"", 0), CAE_JSONRPC_INVALID_REQUEST);
	ck_assert_int_eq(parse_code("42", 0), CAE_JSONRPC_INVALID_REQUEST);
	ck_assert_int_eq(parse_code("null", 0), CAE_JSONRPC_INVALID_REQUEST);

	/* Depth: exactly at the limit passes, one more is refused before parsing. Brackets
	 * inside strings do not count. */
	char deep[512];
	size_t n = 0;
	for (int i = 0; i < 8; i++)
		deep[n++] = '[';
	for (int i = 0; i < 8; i++)
		deep[n++] = ']';
	deep[n] = '\0';
	ck_assert_int_eq(parse_code(deep, 8), 0);
	ck_assert_int_eq(parse_code(deep, 7), CAE_JSONRPC_INVALID_REQUEST);
	ck_assert_int_eq(parse_code("{\"s\":\"[[[[[[[[[[[[\\\"[[[[[[\"}", 2), 0);
	/* Far deeper than jansson's own limit, and unterminated: still a clean error. */
	char *abyss = malloc(100001);
	memset(abyss, '[', 100000);
	abyss[100000] = '\0';
	ck_assert_int_eq(parse_code(abyss, 0), CAE_JSONRPC_INVALID_REQUEST);
	free(abyss);
}
END_TEST

static int validate_code(const char *s, cae_jsonrpc_msg *m, json_t **keep)
{
	json_t *v;
	cae_jsonrpc_err e = {0};
	ck_assert_int_eq(cae_jsonrpc_parse(s, strlen(s), 0, &v, &e), 0);
	int r = cae_jsonrpc_validate(v, m, &e);
	if (keep)
		*keep = v;
	else
		json_decref(v);
	return r == 0 ? 0 : e.code;
}

START_TEST(validate_kinds)
{
	cae_jsonrpc_msg m;
	json_t *v;
	ck_assert_int_eq(
	    validate_code("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}", &m, &v), 0);
	ck_assert_int_eq(m.kind, CAE_JSONRPC_REQUEST);
	ck_assert_str_eq(m.method, "ping");
	ck_assert_int_eq(json_integer_value(m.id), 7);
	ck_assert_ptr_null(m.params);
	json_decref(v);

	ck_assert_int_eq(validate_code("{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"method\":\"x\","
				       "\"params\":{\"k\":1}}",
				       &m, &v),
			 0);
	ck_assert_str_eq(json_string_value(m.id), "abc");
	ck_assert(json_is_object(m.params));
	json_decref(v);

	ck_assert_int_eq(
	    validate_code("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"}", &m, NULL), 0);
	ck_assert_int_eq(m.kind, CAE_JSONRPC_NOTIFICATION);

	ck_assert_int_eq(validate_code("{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}", &m, NULL),
			 0);
	ck_assert_int_eq(m.kind, CAE_JSONRPC_RESPONSE);
	ck_assert_int_eq(validate_code("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-1,"
				       "\"message\":\"m\"}}",
				       &m, NULL),
			 0);
	ck_assert_int_eq(m.kind, CAE_JSONRPC_RESPONSE);
}
END_TEST

START_TEST(validate_rejects)
{
	cae_jsonrpc_msg m;
	json_t *v;
	const char *bad[] = {
	    "[]",
	    "{\"id\":1,\"method\":\"ping\"}",			     /* no jsonrpc */
	    "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}",    /* wrong version */
	    "{\"jsonrpc\":2.0,\"id\":1,\"method\":\"ping\"}",	     /* not a string */
	    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}",	     /* method type */
	    "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", /* MCP: no null id */
	    "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}",  /* fractional id */
	    "{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"ping\"}",
	    "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}",
	    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"p\",\"params\":3}", /* params type */
	    "{\"jsonrpc\":\"2.0\",\"id\":1}",				    /* nothing */
	    "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1,\"error\":{}}",	    /* both */
	    "{\"jsonrpc\":\"2.0\",\"result\":1}",			 /* response without id */
	    "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":\"x\"}}", /* bad error object */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(validate_code(bad[i], &m, NULL) == CAE_JSONRPC_INVALID_REQUEST, "%s",
			      bad[i]);
	/* A request that is invalid for another reason keeps its valid id for the answer. */
	ck_assert_int_eq(
	    validate_code("{\"jsonrpc\":\"1.0\",\"id\":9,\"method\":\"ping\"}", &m, &v),
	    CAE_JSONRPC_INVALID_REQUEST);
	ck_assert_int_eq(json_integer_value(m.id), 9);
	json_decref(v);
	ck_assert_int_eq(
	    validate_code("{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"ping\"}", &m, NULL),
	    CAE_JSONRPC_INVALID_REQUEST);
	ck_assert_ptr_null(m.id);
}
END_TEST

START_TEST(build_and_encode)
{
	json_t *id = json_integer(5);
	json_t *r = cae_jsonrpc_result(id, json_pack("{s:s}", "text", "line1\nline2"));
	size_t n;
	char *s = cae_jsonrpc_encode(r, &n);
	ck_assert_str_eq(
	    s, "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"text\":\"line1\\nline2\"}}\n");
	ck_assert_uint_eq(n, strlen(s));
	ck_assert_ptr_null(memchr(s, '\n', n - 1));
	free(s);
	json_decref(r);

	/* null id, data, and an error message that is not UTF-8 gets repaired */
	json_t *e =
	    cae_jsonrpc_error(NULL, CAE_JSONRPC_PARSE_ERROR, "bad \xff byte", json_string("d"));
	s = cae_jsonrpc_encode(e, NULL);
	ck_assert_str_eq(s, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,"
			    "\"message\":\"bad \xef\xbf\xbd byte\",\"data\":\"d\"}}\n");
	free(s);
	json_decref(e);

	json_t *note =
	    cae_jsonrpc_notification("notifications/progress", json_pack("{s:i}", "p", 1));
	s = cae_jsonrpc_encode(note, NULL);
	ck_assert_str_eq(s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\","
			    "\"params\":{\"p\":1}}\n");
	free(s);
	json_decref(note);
	json_decref(id);

	/* result(NULL) is an allocation failure path: no leak, NULL back */
	ck_assert_ptr_null(cae_jsonrpc_result(NULL, NULL));
}
END_TEST

/* Ids beyond int64 or double: the answer carries the id exactly as the client wrote it. */
static void check_big_id(const char *id_text)
{
	char line[512];
	snprintf(line, sizeof(line),
		 "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"x\",\"arguments\":{\"n\":123456789012345678901234567890,\"r\":-2e999,"
		 "\"s\":\"1e400 \\\"in a string\\\" 99999999999999999999\"}}}",
		 id_text);
	json_t *v;
	cae_jsonrpc_err e;
	ck_assert_int_eq(cae_jsonrpc_parse(line, strlen(line), 0, &v, &e), 0);
	cae_jsonrpc_msg m;
	ck_assert_int_eq(cae_jsonrpc_validate(v, &m, &e), 0);
	ck_assert_int_eq(m.kind, CAE_JSONRPC_REQUEST);
	size_t n;
	const char *tok = cae_jsonrpc_raw_number(m.id, &n);
	ck_assert_ptr_nonnull(tok);
	ck_assert_uint_eq(n, strlen(id_text));
	ck_assert(memcmp(tok, id_text, n) == 0);
	/* Other big numbers: a real where a double holds them, else their text; strings are
	 * left alone. */
	json_t *args = json_object_get(json_object_get(v, "params"), "arguments");
	ck_assert(json_is_real(json_object_get(args, "n")));
	ck_assert(json_real_value(json_object_get(args, "n")) > 1e29);
	ck_assert_str_eq(json_string_value(json_object_get(args, "r")), "-2e999");
	ck_assert_str_eq(json_string_value(json_object_get(args, "s")),
			 "1e400 \"in a string\" 99999999999999999999");

	json_t *copy = json_deep_copy(m.id); /* as the server's jobs keep it */
	json_t *r = cae_jsonrpc_result(copy, json_object());
	char *s = cae_jsonrpc_encode(r, &n);
	char expect[256];
	snprintf(expect, sizeof(expect), "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{}}\n",
		 id_text);
	ck_assert_str_eq(s, expect);
	ck_assert_uint_eq(n, strlen(expect));
	free(s);
	json_decref(r);
	/* in a batch, each element's id */
	json_t *b = json_pack("[o, o]", cae_jsonrpc_error(copy, -32601, "no", NULL),
			      cae_jsonrpc_result(copy, json_pack("{s:s}", "id", "x")));
	s = cae_jsonrpc_encode(b, &n);
	snprintf(expect, sizeof(expect),
		 "[{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":{\"code\":-32601,\"message\":\"no\"}},"
		 "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"id\":\"x\"}}]\n",
		 id_text, id_text);
	ck_assert_str_eq(s, expect);
	ck_assert_uint_eq(n, strlen(expect));
	free(s);
	json_decref(b);
	json_decref(copy);
	json_decref(v);
}

START_TEST(ids_beyond_int64_are_echoed)
{
	check_big_id("123456789012345678901234567890");
	check_big_id("-9223372036854775809");
	check_big_id("1e400");
	check_big_id("-1.5E+99999");
	/* still a number jansson holds: an ordinary id */
	json_t *v;
	cae_jsonrpc_err e;
	const char *ok = "{\"jsonrpc\":\"2.0\",\"id\":9223372036854775807,\"method\":\"ping\"}";
	ck_assert_int_eq(cae_jsonrpc_parse(ok, strlen(ok), 0, &v, &e), 0);
	ck_assert(json_is_integer(json_object_get(v, "id")));
	json_decref(v);
	/* a text that also has a NUL escape is not rewritten: a parse error as before */
	const char *nul = "{\"jsonrpc\":\"2.0\",\"id\":1e400,\"method\":\"a\\u0000b\"}";
	ck_assert_int_eq(cae_jsonrpc_parse(nul, strlen(nul), 0, &v, &e), -EINVAL);
	ck_assert_int_eq(e.code, CAE_JSONRPC_PARSE_ERROR);
	/* a string id cannot pose as one: NUL is refused in strings */
	const char *fake = "{\"jsonrpc\":\"2.0\",\"id\":\"\\u00005\",\"method\":\"ping\"}";
	ck_assert_int_eq(cae_jsonrpc_parse(fake, strlen(fake), 0, &v, &e), -EINVAL);
}
END_TEST

/* ---- the encoder gives json_dumps's bytes ---------------------------------------------- */

static uint64_t rng_state;
static bool gen_plain; /* no reals, no NUL, no 19-digit integers: all the fast parser's */

static unsigned rnd(unsigned n)
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (unsigned)(rng_state >> 33) % n;
}

/* Random valid UTF-8 (with NULs, control characters, quotes, backslashes, slashes, DEL,
 * and 2-, 3- and 4-byte characters) in buf; returns its length. */
static size_t random_text(char *buf, size_t max)
{
	static const char *const pieces[] = {
	    "a",
	    "Z",
	    " ",
	    "0",
	    "\"",
	    "\\",
	    "/",
	    "\n",
	    "\t",
	    "\r",
	    "\b",
	    "\f",
	    "\x01",
	    "\x1f",
	    "\x7f",
	    "\xc3\xa9",
	    "\xe2\x80\xa8",
	    "\xef\xbf\xbd",
	    "\xf0\x9f\x98\x80",
	    "line 01: the quick brown fox\n",
	};
	size_t n = 0, want = rnd(4) == 0 ? rnd(3000) : rnd(24);
	while (n < want) {
		bool nul = !gen_plain && rnd(40) == 0;
		const char *p = nul ? "" : pieces[rnd(ARRAY_SIZE(pieces))];
		size_t l = nul ? 1 : strlen(p);
		if (n + l > max)
			break;
		memcpy(buf + n, p, l);
		n += l;
	}
	return n;
}

static json_t *random_value(unsigned depth)
{
	static char text[4096];
	unsigned kind = depth >= 5 ? 2 + rnd(7) : rnd(9);
	switch (kind) {
	case 0: {
		json_t *o = json_object();
		for (unsigned i = 0, n = rnd(6); i < n; i++) {
			size_t l = random_text(text, 40);
			json_object_setn_new(o, text, l, random_value(depth + 1));
		}
		return o;
	}
	case 1: {
		json_t *a = json_array();
		for (unsigned i = 0, n = rnd(6); i < n; i++)
			json_array_append_new(a, random_value(depth + 1));
		return a;
	}
	case 2:
	case 3: {
		size_t l = random_text(text, sizeof(text));
		return json_stringn(text, l);
	}
	case 4: {
		static const json_int_t ints[] = {0, -1, 7, -32700, INT64_MAX, INT64_MIN};
		return rnd(2) ? json_integer(ints[rnd(gen_plain ? 4 : ARRAY_SIZE(ints))])
			      : json_integer((json_int_t)rnd(1000000) - 500000);
	}
	case 5: {
		if (gen_plain)
			return json_string("no real");
		static const double reals[] = {0.0,  -0.5, 1.0, 1e300, 3.141592653589793,
					       1e-7, 12.0};
		return json_real(reals[rnd(ARRAY_SIZE(reals))] * (rnd(2) ? 1 : -3));
	}
	case 6:
		return json_true();
	case 7:
		return json_false();
	default:
		return json_null();
	}
}

static void assert_encodes_like_dumps(const json_t *v)
{
	char *want = json_dumps(v, JSON_COMPACT);
	size_t n = 0;
	char *got = cae_jsonrpc_encode(v, &n);
	if (!want) {
		ck_assert_ptr_null(got);
		return;
	}
	ck_assert_ptr_nonnull(got);
	size_t wl = strlen(want);
	ck_assert_uint_eq(n, wl + 1);
	ck_assert_int_eq(memcmp(got, want, wl), 0);
	ck_assert_int_eq(got[wl], '\n');
	ck_assert_int_eq(got[wl + 1], '\0');
	free(want);
	free(got);
}

START_TEST(encode_matches_jansson)
{
	rng_state = 42;
	for (int i = 0; i < 3000; i++) {
		json_t *v = rnd(2) ? json_object() : json_array();
		for (unsigned k = 0, m = 1 + rnd(4); k < m; k++) {
			if (json_is_object(v))
				json_object_set_new(v, k % 2 ? "content" : "structuredContent",
						    random_value(1));
			else
				json_array_append_new(v, random_value(1));
		}
		assert_encodes_like_dumps(v);
		json_decref(v);
	}

	/* every byte value below 0x80, one at a time and all together */
	char all[128];
	for (int c = 0; c < 128; c++) {
		all[c] = (char)c;
		json_t *v = json_pack("{s:s%}", "k", all + c, (size_t)1);
		assert_encodes_like_dumps(v);
		json_decref(v);
	}
	json_t *v = json_pack("[s%]", all, sizeof(all));
	assert_encodes_like_dumps(v);
	json_decref(v);
	/* ... and at every offset of a word-sized scan, next to plain bytes */
	for (int c = 0; c < 128; c++)
		for (int at = 0; at < 18; at++) {
			char text[24];
			memset(text, 'a', sizeof(text));
			text[at] = (char)c;
			v = json_pack("[s%]", text, sizeof(text));
			assert_encodes_like_dumps(v);
			json_decref(v);
		}

	/* one long string in several places (a tool result's text and structured output), next
	 * to an equal string that is another value, one as long, and a short one */
	char longtext[600];
	for (size_t i = 0; i < sizeof(longtext); i++)
		longtext[i] = "ab\"\\\n\t\x01 xyz\xc3\xa9"[i % 13];
	longtext[sizeof(longtext) - 1] = '\0';
	json_t *shared = json_string(longtext);
	ck_assert_ptr_nonnull(shared);
	char other[sizeof(longtext)];
	memcpy(other, longtext, sizeof(other));
	other[0] = 'Z'; /* as long, not the same */
	v = json_pack("{s:[{s:O}], s:{s:O, s:s, s:O, s:s}, s:[O, s, O]}", "content", "text", shared,
		      "structuredContent", "output", shared, "copy", longtext, "again", shared,
		      "other", other, "list", shared, "tail", shared);
	ck_assert_ptr_nonnull(v);
	assert_encodes_like_dumps(v);
	json_decref(v);
	json_decref(shared);

	/* empty containers, and nesting past the fast path's depth (json_dumps takes over) */
	v = json_pack("{s:{}, s:[], s:[{}], s:\"\"}", "o", "a", "ao", "s");
	assert_encodes_like_dumps(v);
	json_decref(v);
	json_t *deep = json_string("bottom");
	for (int i = 0; i < 200; i++)
		deep = i % 2 ? json_pack("[o]", deep) : json_pack("{s:o}", "k", deep);
	assert_encodes_like_dumps(deep);
	json_decref(deep);
}
END_TEST

START_TEST(encode_refuses_what_jansson_refuses)
{
	/* not a container */
	json_t *s = json_string("x");
	ck_assert_ptr_null(cae_jsonrpc_encode(s, NULL));
	json_decref(s);

	/* a string that is not UTF-8 (only json_stringn_nocheck can make one) */
	json_t *v = json_pack("{s:o}", "text", json_stringn_nocheck("ok \xff bad", 8));
	ck_assert_ptr_null(cae_jsonrpc_encode(v, NULL));
	assert_encodes_like_dumps(v);
	json_decref(v);
	v = json_pack("[s, o]", "fine", json_stringn_nocheck("\xe2\x82", 2)); /* cut short */
	ck_assert_ptr_null(cae_jsonrpc_encode(v, NULL));
	json_decref(v);

	/* a reference cycle */
	json_t *a = json_array(), *o = json_object();
	json_array_append(a, o);
	json_object_set(o, "loop", a);
	ck_assert_ptr_null(cae_jsonrpc_encode(a, NULL));
	json_object_del(o, "loop"); /* break the cycle so that both are freed */
	json_decref(o);
	json_decref(a);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("jsonrpc");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, framer_lines_in_pieces);
	tcase_add_test(tc, framer_oversized_line_is_dropped_and_stream_continues);
	tcase_add_test(tc, framer_exact_limit);
	tcase_add_test(tc, framer_feed_is_bounded);
	tcase_add_test(tc, framer_reads_fd);
	tcase_add_test(tc, parse_garbage_truncated_and_deep);
	tcase_add_test(tc, validate_kinds);
	tcase_add_test(tc, validate_rejects);
	tcase_add_test(tc, build_and_encode);
	tcase_add_test(tc, ids_beyond_int64_are_echoed);
	tcase_add_test(tc, encode_matches_jansson);
	tcase_add_test(tc, encode_refuses_what_jansson_refuses);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(make_suite());
}
