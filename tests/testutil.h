/* Shared helpers for the Check-based test binaries (one binary per module).
 * Check forks every test into its own process with a timeout (CK_DEFAULT_TIMEOUT). */
#ifndef CAE_TESTUTIL_H
#define CAE_TESTUTIL_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fs.h"

/* Makes a fresh temporary directory; the caller frees the string. */
static inline char *tu_mkdtemp(void)
{
	const char *base = getenv("TMPDIR");
	char tmpl[4096];
	snprintf(tmpl, sizeof(tmpl), "%s/cae-test-XXXXXX", base && *base ? base : "/tmp");
	char *d = mkdtemp(tmpl);
	ck_assert_ptr_nonnull(d);
	return strdup(d);
}

/* Writes a file (creating it) relative to dir, aborting the test on failure. */
static inline void tu_write(const char *dir, const char *name, const char *content)
{
	char *p = cae_path_join(dir, name);
	FILE *f = fopen(p, "wb");
	ck_assert_msg(f != NULL, "cannot create %s", p);
	fwrite(content, 1, strlen(content), f);
	fclose(f);
	free(p);
}

/* Runs a suite (built by make_suite) and exits with its status. */
static inline int tu_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif
