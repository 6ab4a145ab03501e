#include "cae/log.h"
#include "base/macro.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>

/* A logger writing into a temporary file; read_lines() parses what it wrote. */
struct sink {
	char *dir;
	char *path;
	int fd;
};

static void sink_open(struct sink *s)
{
	s->dir = tu_mkdtemp();
	s->path = cae__path_join(s->dir, "log");
	s->fd = open(s->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	ck_assert_int_ge(s->fd, 0);
}

static void sink_close(struct sink *s)
{
	close(s->fd);
	cae__rm_rf(s->dir);
	free(s->path);
	free(s->dir);
}

/* Every line parsed as a JSON object with ts/level/event; returns an array of them. */
static json_t *read_lines(struct sink *s)
{
	char *data = NULL;
	size_t len = 0;
	ck_assert_int_eq(cae__read_file(AT_FDCWD, s->path, 256u << 20, &data, &len), 0);
	json_t *arr = json_array();
	char *p = data;
	ck_assert_msg(len == 0 || data[len - 1] == '\n', "output does not end with a newline");
	while (p < data + len) {
		char *nl = memchr(p, '\n', (size_t)(data + len - p));
		ck_assert_ptr_nonnull(nl);
		json_error_t jerr;
		json_t *o = json_loadb(p, (size_t)(nl - p), 0, &jerr);
		ck_assert_msg(o != NULL, "invalid JSON line: %s (%.*s)", jerr.text,
			      (int)MIN(nl - p, 200), p);
		ck_assert(json_is_object(o));
		const char *ts = json_string_value(json_object_get(o, "ts"));
		ck_assert_ptr_nonnull(ts);
		ck_assert_uint_eq(strlen(ts), 24); /* 2026-11-22T02:25:36.123Z */
		ck_assert_int_eq(ts[23], 'Z');
		ck_assert_ptr_nonnull(json_string_value(json_object_get(o, "level")));
		ck_assert_ptr_nonnull(json_string_value(json_object_get(o, "event")));
		json_array_append_new(arr, o);
		p = nl + 1;
	}
	free(data);
	return arr;
}

static const char *field_str(json_t *line, const char *key)
{
	return json_string_value(json_object_get(line, key));
}

START_TEST(lines_are_json)
{
	struct sink s;
	sink_open(&s);
	cae_log *log = cae_log_new(s.fd, CAE_LOG_DEBUG);
	cae_log_event(log, CAE_LOG_INFO, "worker.patch_execution_start", "starting %d commands", 3);
	cae_log_event(log, CAE_LOG_DEBUG, "x.nomsg", NULL);
	cae_log_fields(log, CAE_LOG_WARN, "worker.command_executed",
		       json_pack("{s:s, s:i, s:b, s:{s:[i,s]}, s:s, s:s}", "command",
				 "echo \"hi\"\n", "duration_ms", 12, "success", 1, "nested", "a", 1,
				 "b", "ts", "spoof", "quote", "tab\there"),
		       "ran %s", "echo");
	cae_log_fields(log, CAE_LOG_ERROR, "x.null_fields", NULL, NULL);
	cae_log_fields(log, CAE_LOG_ERROR, "x.not_object", json_integer(3), "m");
	cae_log_event(log, CAE_LOG_INFO, "x.bad_utf8", "name \xff\xfe end");
	cae_log_free(log);

	json_t *lines = read_lines(&s);
	ck_assert_uint_eq(json_array_size(lines), 6);
	json_t *l0 = json_array_get(lines, 0);
	ck_assert_str_eq(field_str(l0, "level"), "info");
	ck_assert_str_eq(field_str(l0, "event"), "worker.patch_execution_start");
	ck_assert_str_eq(field_str(l0, "msg"), "starting 3 commands");
	/* key order: ts, level, event, msg, then fields */
	const char *first = json_object_iter_key(json_object_iter(l0));
	ck_assert_str_eq(first, "ts");
	json_t *l1 = json_array_get(lines, 1);
	ck_assert_str_eq(field_str(l1, "level"), "debug");
	ck_assert_ptr_null(json_object_get(l1, "msg"));
	json_t *l2 = json_array_get(lines, 2);
	ck_assert_str_eq(field_str(l2, "level"), "warn");
	ck_assert_str_eq(field_str(l2, "command"), "echo \"hi\"\n");
	ck_assert_int_eq(json_integer_value(json_object_get(l2, "duration_ms")), 12);
	ck_assert(json_is_true(json_object_get(l2, "success")));
	ck_assert_str_eq(json_string_value(json_array_get(
			     json_object_get(json_object_get(l2, "nested"), "a"), 1)),
			 "b");
	ck_assert_str_ne(field_str(l2, "ts"), "spoof"); /* reserved names are not overridden */
	ck_assert_str_eq(field_str(l2, "msg"), "ran echo");
	ck_assert_str_eq(field_str(json_array_get(lines, 3), "level"), "error");
	ck_assert_str_eq(field_str(json_array_get(lines, 5), "msg"),
			 "name \xef\xbf\xbd\xef\xbf\xbd end");
	json_decref(lines);
	sink_close(&s);
}
END_TEST

START_TEST(levels_filter)
{
	struct sink s;
	sink_open(&s);
	cae_log *log = cae_log_new(s.fd, CAE_LOG_WARN);
	ck_assert(!cae_log_enabled(log, CAE_LOG_INFO));
	ck_assert(cae_log_enabled(log, CAE_LOG_WARN));
	cae_log_event(log, CAE_LOG_DEBUG, "a.debug", "x");
	cae_log_event(log, CAE_LOG_INFO, "a.info", "x");
	cae_log_event(log, CAE_LOG_WARN, "a.warn", "x");
	cae_log_fields(log, CAE_LOG_INFO, "a.info_fields", json_pack("{s:i}", "n", 1), NULL);
	cae_log_event(log, CAE_LOG_ERROR, "a.error", "x");
	cae_log_set_level(log, CAE_LOG_DEBUG);
	cae_log_event(log, CAE_LOG_DEBUG, "a.debug2", NULL);
	cae_log_free(log);
	json_t *lines = read_lines(&s);
	ck_assert_uint_eq(json_array_size(lines), 3);
	ck_assert_str_eq(field_str(json_array_get(lines, 0), "event"), "a.warn");
	ck_assert_str_eq(field_str(json_array_get(lines, 1), "event"), "a.error");
	ck_assert_str_eq(field_str(json_array_get(lines, 2), "event"), "a.debug2");
	json_decref(lines);
	sink_close(&s);

	cae_log_level l;
	ck_assert_int_eq(cae_log_level_parse("DEBUG", &l), 0);
	ck_assert_int_eq(l, CAE_LOG_DEBUG);
	ck_assert_int_eq(cae_log_level_parse("warning", &l), 0);
	ck_assert_int_eq(l, CAE_LOG_WARN);
	ck_assert_int_eq(cae_log_level_parse("error", &l), 0);
	ck_assert_int_eq(l, CAE_LOG_ERROR);
	ck_assert_int_eq(cae_log_level_parse("loud", &l), -EINVAL);
	ck_assert_int_eq(cae_log_level_parse(NULL, &l), -EINVAL);
	ck_assert_str_eq(cae_log_level_name(CAE_LOG_INFO), "info");
}
END_TEST

START_TEST(null_logger_is_noop)
{
	cae_log_event(NULL, CAE_LOG_ERROR, "x.y", "z %d", 1);
	/* fields are stolen even with a NULL logger: ASan/LSan would report a leak */
	cae_log_fields(NULL, CAE_LOG_ERROR, "x.y", json_pack("{s:s}", "a", "b"), NULL);
	ck_assert(!cae_log_enabled(NULL, CAE_LOG_ERROR));
	ck_assert_int_eq(cae_log_add_secret(NULL, "abcdef"), 0);
	cae_log_set_level(NULL, CAE_LOG_DEBUG);
	cae_log_free(NULL);
	char *r = cae_redact(NULL, "https://u:p@h/x");
	ck_assert_str_eq(r, "https://***@h/x");
	free(r);
	ck_assert_ptr_null(cae_redact(NULL, NULL));
}
END_TEST

START_TEST(url_redaction)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
	    {"https://user:token@host/x", "https://***@host/x"},
	    {"git clone https://x-access-token:ghs_abc@github.com/o/r.git dir",
	     "git clone https://***@github.com/o/r.git dir"},
	    {"https://oauth2:glpat-1@gitlab.example.com:8443/g/p.git",
	     "https://***@gitlab.example.com:8443/g/p.git"},
	    {"https://TOKENONLY@github.com/o/r", "https://***@github.com/o/r"},
	    {"https://u:p@ss@host/x", "https://***@host/x"}, /* the last '@' ends the userinfo */
	    {"https://host/path@notuserinfo", "https://host/path@notuserinfo"},
	    {"https://host?q=a@b", "https://host?q=a@b"},
	    {"no url here, a@b and :// alone", "no url here, a@b and :// alone"},
	    {"two: http://a:b@h1/ and ftp://c:d@h2", "two: http://***@h1/ and ftp://***@h2"},
	    {"\"https://u:p@h\"", "\"https://***@h\""},
	    {"tcp://admin:pw@10.0.0.1:2376", "tcp://***@10.0.0.1:2376"},
	    {"https://@host/x", "https://@host/x"},
	    {"", ""},
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		char *r = cae_redact_url(cases[i].in);
		ck_assert_msg(strcmp(r, cases[i].out) == 0, "%s -> %s (expected %s)", cases[i].in,
			      r, cases[i].out);
		free(r);
	}
}
END_TEST

START_TEST(secret_redaction)
{
	struct sink s;
	sink_open(&s);
	cae_log *log = cae_log_new(s.fd, CAE_LOG_DEBUG);
	ck_assert_int_eq(cae_log_add_secret(log, "ghp_SECRET123"), 0);
	ck_assert_int_eq(cae_log_add_secret(log, "ghp_SECRET123"), 0);	 /* twice: harmless */
	ck_assert_int_eq(cae_log_add_secret(log, "SECRET123456789"), 0); /* overlaps, longer */
	ck_assert_int_eq(cae_log_add_secret(log, "abc"), -EINVAL);
	ck_assert_int_eq(cae_log_add_secret(log, ""), 0);
	ck_assert_int_eq(cae_log_add_secret(log, NULL), 0);

	char *r = cae_redact(log, "a ghp_SECRET123 b ghp_SECRET123ghp_SECRET123 c SECRET123456789");
	ck_assert_str_eq(r, "a *** b ****** c ***");
	free(r);
	size_t n;
	r = cae_redactn(log, "x\0ghp_SECRET123\0y", 17, &n);
	ck_assert_uint_eq(n, 7);
	ck_assert(memcmp(r, "x\0***\0y", 7) == 0);
	free(r);

	cae_log_event(log, CAE_LOG_INFO, "git.push",
		      "pushing with ghp_SECRET123 to https://u:pw@h/r");
	cae_log_fields(log, CAE_LOG_INFO, "git.clone",
		       json_pack("{s:s, s:{s:[s, {s:s}]}, s:s, s:i}", "url",
				 "https://x-access-token:zzz@github.com/o/r.git", "nested",
				 "deeper", "plain ghp_SECRET123", "deepest", "it is ghp_SECRET123!",
				 "ghp_SECRET123", "as a key", "n", 5),
		       NULL);
	cae_log_event(log, CAE_LOG_INFO, "ghp_SECRET123", NULL);
	cae_log_free(log);

	char *raw = NULL;
	size_t len;
	ck_assert_int_eq(cae__read_file(AT_FDCWD, s.path, 1 << 20, &raw, &len), 0);
	ck_assert_msg(strstr(raw, "ghp_SECRET123") == NULL, "secret leaked: %s", raw);
	ck_assert(strstr(raw, "zzz") == NULL);
	ck_assert(strstr(raw, "pw@") == NULL);
	free(raw);

	json_t *lines = read_lines(&s);
	ck_assert_str_eq(field_str(json_array_get(lines, 0), "msg"),
			 "pushing with *** to https://***@h/r");
	json_t *l1 = json_array_get(lines, 1);
	ck_assert_str_eq(field_str(l1, "url"), "https://***@github.com/o/r.git");
	json_t *deeper = json_object_get(json_object_get(l1, "nested"), "deeper");
	ck_assert_str_eq(json_string_value(json_array_get(deeper, 0)), "plain ***");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(deeper, 1), "deepest")),
			 "it is ***!");
	ck_assert_str_eq(field_str(l1, "***"), "as a key");
	ck_assert_int_eq(json_integer_value(json_object_get(l1, "n")), 5);
	ck_assert_str_eq(field_str(json_array_get(lines, 2), "event"), "***");
	json_decref(lines);

	/* cae_redact_json for other modules */
	cae_log *l2 = cae_log_new(-1, CAE_LOG_INFO);
	cae_log_add_secret(l2, "tok-12345");
	json_t *in = json_pack("{s:[s,i,n,b]}", "a", "x tok-12345", 1, 0);
	json_t *out = cae_redact_json(l2, in);
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(out, "a"), 0)), "x ***");
	ck_assert_uint_eq(json_array_size(json_object_get(out, "a")), 4);
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(in, "a"), 0)),
			 "x tok-12345");
	json_decref(in);
	json_decref(out);
	cae_log_free(l2);
	sink_close(&s);
}
END_TEST

/* A cae_secrets on its own, without any logger: what a session masks tool output with. */
START_TEST(secrets_without_logger)
{
	cae_secrets *sec = cae_secrets_new();
	ck_assert_ptr_nonnull(sec);
	ck_assert_int_eq(cae_secrets_add(sec, "tok-ABCDEF"), 0);
	ck_assert_int_eq(cae_secrets_add(sec, "tok-ABCDEF"), 0); /* twice: harmless */
	ck_assert_int_eq(cae_secrets_add(sec, "ABC"), -EINVAL);
	ck_assert_int_eq(cae_secrets_add(sec, NULL), 0);
	ck_assert_int_eq(cae_secrets_add(NULL, "tok-ABCDEF"), 0);

	char *r = cae_secrets_mask(sec, "x tok-ABCDEF y https://u:tok@h/z");
	ck_assert_str_eq(r, "x *** y https://***@h/z");
	free(r);
	r = cae_secrets_mask(NULL, "x tok-ABCDEF https://u:p@h/");
	ck_assert_str_eq(r, "x tok-ABCDEF https://***@h/");
	free(r);
	ck_assert_ptr_null(cae_secrets_mask(sec, NULL));

	/* JSON: keys and nested strings masked, other values copied, the input untouched;
	 * max_bytes 0 cuts nothing, a max cuts and marks. */
	json_t *in = json_pack("{s:[s, i, b], s:s}", "tok-ABCDEF", "a tok-ABCDEF b", 7, 1, "long",
			       "0123456789012345678901234567890123456789");
	json_t *out = cae_secrets_mask_json(sec, in, 0);
	json_t *a = json_object_get(out, "***");
	ck_assert_str_eq(json_string_value(json_array_get(a, 0)), "a *** b");
	ck_assert_int_eq(json_integer_value(json_array_get(a, 1)), 7);
	ck_assert(json_is_true(json_array_get(a, 2)));
	ck_assert_uint_eq(strlen(json_string_value(json_object_get(out, "long"))), 40);
	ck_assert_ptr_nonnull(json_object_get(in, "tok-ABCDEF"));
	json_decref(out);
	out = cae_secrets_mask_json(sec, in, 30);
	ck_assert_str_eq(json_string_value(json_object_get(out, "long")),
			 "0123456789012345...[truncated]");
	json_decref(out);
	json_decref(in);

	json_t *js = cae_secrets_json_string(sec, "\xff tok-ABCDEF", 12, 0);
	ck_assert_str_eq(json_string_value(js), "\xef\xbf\xbd ***");
	json_decref(js);
	cae_secrets_free(sec);
	cae_secrets_free(NULL);
}
END_TEST

/* The logger masks with its own cae_secrets, the one cae_log_secrets hands out. */
START_TEST(logger_secrets_object)
{
	ck_assert_ptr_null(cae_log_secrets(NULL));
	struct sink s;
	sink_open(&s);
	cae_log *log = cae_log_new(s.fd, CAE_LOG_DEBUG);
	ck_assert_int_eq(cae_secrets_add(cae_log_secrets(log), "via-the-object"), 0);
	cae_log_event(log, CAE_LOG_INFO, "x.y", "a via-the-object b");
	char *r = cae_redact(log, "via-the-object");
	ck_assert_str_eq(r, "***");
	free(r);
	cae_log_free(log);
	json_t *lines = read_lines(&s);
	ck_assert_str_eq(field_str(json_array_get(lines, 0), "msg"), "a *** b");
	json_decref(lines);
	sink_close(&s);
}
END_TEST

START_TEST(long_strings_capped)
{
	struct sink s;
	sink_open(&s);
	cae_log *log = cae_log_new(s.fd, CAE_LOG_DEBUG);
	size_t big = 3 * CAE_LOG_MAX_STRING;
	char *text = malloc(big + 1);
	memset(text, 'a', big);
	text[big] = '\0';
	cae_log_event(log, CAE_LOG_INFO, "x.long_msg", "%s", text);
	cae_log_fields(log, CAE_LOG_INFO, "x.long_field", json_pack("{s:s}", "out", text), NULL);
	/* deep nesting is cut, not recursed into forever */
	json_t *deep = json_string("leaf");
	for (int i = 0; i < 100; i++)
		deep = json_pack("[o]", deep);
	cae_log_fields(log, CAE_LOG_INFO, "x.deep", json_pack("{s:o}", "d", deep), NULL);
	cae_log_free(log);
	free(text);
	json_t *lines = read_lines(&s);
	ck_assert_uint_eq(json_array_size(lines), 3);
	const char *m = field_str(json_array_get(lines, 0), "msg");
	ck_assert_uint_le(strlen(m), CAE_LOG_MAX_STRING);
	ck_assert_str_eq(m + strlen(m) - 14, "...[truncated]");
	const char *o = field_str(json_array_get(lines, 1), "out");
	ck_assert_uint_le(strlen(o), CAE_LOG_MAX_STRING);
	char *d = json_dumps(json_array_get(lines, 2), 0);
	ck_assert(strstr(d, "nested too deep") != NULL);
	free(d);
	json_decref(lines);
	sink_close(&s);
}
END_TEST

#define THREADS 8
#define PER_THREAD 400

struct writer {
	cae_log *log;
	int id;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	char pad[3000];
	memset(pad, 'a' + w->id, sizeof(pad) - 1);
	pad[sizeof(pad) - 1] = '\0';
	for (int i = 0; i < PER_THREAD; i++)
		cae_log_fields(w->log, CAE_LOG_INFO, "test.concurrent",
			       json_pack("{s:i, s:i, s:s}", "thread", w->id, "seq", i, "pad", pad),
			       "line %d of thread %d", i, w->id);
	return NULL;
}

/* Concurrent writers into one file produce whole lines only, none lost, in order per thread. */
START_TEST(concurrent_writers)
{
	struct sink s;
	sink_open(&s);
	cae_log *log = cae_log_new(s.fd, CAE_LOG_DEBUG);
	cae_log_add_secret(log, "never-seen-secret");
	pthread_t th[THREADS];
	struct writer w[THREADS];
	for (int i = 0; i < THREADS; i++) {
		w[i] = (struct writer){log, i};
		ck_assert_int_eq(pthread_create(&th[i], NULL, writer_main, &w[i]), 0);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	cae_log_free(log);
	json_t *lines = read_lines(&s);
	ck_assert_uint_eq(json_array_size(lines), THREADS * PER_THREAD);
	int next[THREADS] = {0};
	size_t i;
	json_t *l;
	json_array_foreach(lines, i, l)
	{
		int t = (int)json_integer_value(json_object_get(l, "thread"));
		int seq = (int)json_integer_value(json_object_get(l, "seq"));
		ck_assert(t >= 0 && t < THREADS);
		ck_assert_int_eq(seq, next[t]);
		next[t]++;
		ck_assert_uint_eq(strlen(field_str(l, "pad")), 2999);
		ck_assert_int_eq(field_str(l, "pad")[0], 'a' + t);
	}
	json_decref(lines);
	sink_close(&s);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("log");
	TCase *tc = tcase_create("log");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, lines_are_json);
	tcase_add_test(tc, levels_filter);
	tcase_add_test(tc, null_logger_is_noop);
	tcase_add_test(tc, url_redaction);
	tcase_add_test(tc, secret_redaction);
	tcase_add_test(tc, secrets_without_logger);
	tcase_add_test(tc, logger_secrets_object);
	tcase_add_test(tc, long_strings_capped);
	tcase_add_test(tc, concurrent_writers);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(make_suite());
}
