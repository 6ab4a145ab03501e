#include "base/buf.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "base/utf8.h"
#include "cae/error.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

START_TEST(buf_caps_and_counts)
{
	cae_buf b;
	cae__buf_init(&b, 5);
	ck_assert_int_eq(cae__buf_puts(&b, "abc"), 0);
	ck_assert_int_eq(cae__buf_puts(&b, "defgh"), 0);
	ck_assert_uint_eq(b.len, 5);
	ck_assert_str_eq(b.data, "abcde");
	ck_assert(b.truncated);
	ck_assert_uint_eq(b.total, 8);
	size_t n;
	char *s = cae__buf_steal(&b, &n);
	ck_assert_str_eq(s, "abcde");
	free(s);
	ck_assert_ptr_null(b.data);
	cae__buf_clear(&b);
}
END_TEST

START_TEST(buf_printf_large)
{
	cae_buf b;
	cae__buf_init(&b, 10000);
	char big[600];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	ck_assert_int_eq(cae__buf_printf(&b, "%s-%d", big, 42), 0);
	ck_assert_uint_eq(b.len, 602);
	cae__buf_clear(&b);
}
END_TEST

START_TEST(memdup0_keeps_nul_bytes)
{
	char *d = cae__memdup0("a\0b", 3);
	ck_assert_ptr_nonnull(d);
	ck_assert_mem_eq(d, "a\0b\0", 4);
	free(d);
	d = cae__memdup0(NULL, 0);
	ck_assert_str_eq(d, "");
	free(d);
}
END_TEST

START_TEST(utf8_sanitize_and_cut)
{
	const char bad[] = "a\xff"
			   "b\xc3\xa9\xe2\x82";
	size_t n;
	char *s = cae__utf8_sanitize(bad, sizeof(bad) - 1, &n);
	ck_assert_str_eq(s, "a\xef\xbf\xbd"
			    "b\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd");
	free(s);
	ck_assert(!cae__utf8_is_valid("\xed\xa0\x80", 3)); /* surrogate */
	ck_assert(!cae__utf8_is_valid("\xc0\xaf", 2));	   /* overlong */
	ck_assert(cae__utf8_is_valid("\xf0\x9f\x98\x80", 4));
	/* floor drops a trailing partial sequence only */
	ck_assert_uint_eq(cae__utf8_floor("ab\xe2\x82", 4), 2);
	ck_assert_uint_eq(cae__utf8_floor("ab\xe2\x82\xac", 5), 5);
	size_t chars;
	ck_assert_uint_eq(cae__utf8_prefix_chars("\xc3\xa9\xc3\xa9x", 5, 2, &chars), 4);
	ck_assert_uint_eq(chars, 2);
	ck_assert_uint_eq(cae__utf8_suffix_chars("x\xc3\xa9\xc3\xa9", 5, 1), 3);
	ck_assert_uint_eq(cae__utf8_count("x\xc3\xa9\xc3\xa9", 5), 3);
}
END_TEST

START_TEST(fs_beneath_refuses_escapes)
{
	_cleanup_free_ char *d = tu_mkdtemp();
	tu_write(d, "f", "hi");
	_cleanup_free_ char *sub = cae__path_join(d, "sub");
	ck_assert_int_eq(mkdir(sub, 0755), 0);
	_cleanup_free_ char *lnk = cae__path_join(d, "sub/up");
	ck_assert_int_eq(symlink("/", lnk), 0);
	_cleanup_close_ int root = open(d, O_RDONLY | O_DIRECTORY);
	ck_assert_int_ge(root, 0);
	int fd = cae__open_beneath(root, "f", O_RDONLY, 0);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_int_eq(cae__open_beneath(root, "../etc/passwd", O_RDONLY, 0), -EXDEV);
	ck_assert_int_eq(cae__open_beneath(root, "/etc/passwd", O_RDONLY, 0), -EXDEV);
	ck_assert_int_eq(cae__open_beneath(root, "sub/up/etc/passwd", O_RDONLY, 0), -EXDEV);
	ck_assert_int_lt(cae__open_beneath(root, "/proc/self/root/etc/passwd", O_RDONLY, 0), 0);
	cae__rm_rf(d);
}
END_TEST

START_TEST(fs_atomic_write_keeps_mode)
{
	_cleanup_free_ char *d = tu_mkdtemp();
	_cleanup_close_ int root = open(d, O_RDONLY | O_DIRECTORY);
	ck_assert_int_eq(cae__write_file_atomic(root, "a/../x.sh", "#!/bin/sh\n", 10, 0755, true),
			 -ENOENT);
	ck_assert_int_eq(cae__write_file_atomic(root, "x.sh", "#!/bin/sh\n", 10, 0755, true), 0);
	struct stat st;
	ck_assert_int_eq(fstatat(root, "x.sh", &st, 0), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0755);
	char *data;
	size_t n;
	ck_assert_int_eq(cae__read_file(root, "x.sh", 100, &data, &n), 0);
	ck_assert_str_eq(data, "#!/bin/sh\n");
	free(data);
	ck_assert_int_eq(cae__read_file(root, "x.sh", 3, &data, &n), -EFBIG);
	ck_assert_int_eq(cae__write_file_atomic(root, "../escape", "x", 1, 0644, true), -EXDEV);
	ck_assert_int_eq(cae__rm_rf(d), 0);
	ck_assert(!cae__is_dir(d));
}
END_TEST

START_TEST(error_context)
{
	cae_error e;
	cae_error_clear(&e);
	ck_assert_int_eq(cae_error_set(&e, -ENOENT, "no such file %s", "x"), -ENOENT);
	cae_error_prefix(&e, "clone");
	ck_assert_str_eq(e.message, "clone: no such file x");
	ck_assert_str_eq(cae_error_kind(-EINVAL), "INVALID_ARGUMENT");
	ck_assert_int_eq(cae_error_set(NULL, -EINVAL, "ignored"), -EINVAL);
}
END_TEST

START_TEST(time_parse)
{
	ck_assert_int_eq(cae__parse_iso8601("1970-01-01T00:01:00Z"), 60);
	ck_assert_int_eq(cae__parse_iso8601("1970-01-01T00:01:00.123456789Z"), 60);
	ck_assert_int_eq(cae__parse_iso8601("1970-01-01 01:00:00+01:00"), 0);
	ck_assert_int_eq(cae__parse_iso8601("garbage"), -1);
	char b[40];
	cae__iso8601_now(b, sizeof(b));
	ck_assert_int_gt(cae__parse_iso8601(b), 1700000000);
}
END_TEST

START_TEST(path_join)
{
	_cleanup_free_ char *a = cae__path_join("/a/", "/b");
	ck_assert_str_eq(a, "/a/b");
	_cleanup_free_ char *r = cae__path_join("/", "x");
	ck_assert_str_eq(r, "/x");
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("base");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, buf_caps_and_counts);
	tcase_add_test(tc, buf_printf_large);
	tcase_add_test(tc, memdup0_keeps_nul_bytes);
	tcase_add_test(tc, utf8_sanitize_and_cut);
	tcase_add_test(tc, fs_beneath_refuses_escapes);
	tcase_add_test(tc, fs_atomic_write_keeps_mode);
	tcase_add_test(tc, error_context);
	tcase_add_test(tc, time_parse);
	tcase_add_test(tc, path_join);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(make_suite());
}
