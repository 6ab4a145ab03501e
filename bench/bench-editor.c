/* Text editor benchmarks (issue 4), each next to a baseline measured in the same run:
 * 1. `view` of a 51-line file per call through cae_editor_call (target <= 0.1 ms), next to a
 *    plain open + read + close of the same file;
 * 2. `str_replace` on a 10 MB file (target <= 15 ms), next to what any atomic rewrite costs:
 *    a memcpy of the 10 MB plus writing them to a temporary file, fsync, rename;
 * 3. peak RSS over 20 edits of a 10 MB file (target <= 100 MiB), in a fresh child process,
 *    next to a child that only reads the file once.
 * Environment: BENCH_N (view calls, default 10000), BENCH_EDITS (str_replace calls, default
 * 20), TMPDIR (where the files go, default /tmp: the filesystem decides most of the figure of
 * 2., so the lines say which one it was, e.g. TMPDIR=/dev/shm for tmpfs). */
#include "base/fs.h"
#include "base/timeutil.h"
#include "cae/editor.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define BIG_BYTES (10u * 1000u * 1000u)
#define EDITS 20

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static int64_t median(int64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp64);
	return v[n / 2];
}

static void die(const char *what)
{
	fprintf(stderr, "bench-editor: %s\n", what);
	exit(1);
}

/* A 10 MB source-like file with two markers in the middle. */
static char *make_big(size_t *len)
{
	char *b = malloc(BIG_BYTES + 128);
	if (!b)
		die("out of memory");
	size_t o = 0;
	for (unsigned line = 0; o < BIG_BYTES; line++) {
		if (line == 100000)
			o += (size_t)snprintf(b + o, 128, "\tvalue = compute(MARKER_A, %u);\n",
					      line);
		else
			o += (size_t)snprintf(b + o, 128,
					      "\tvalue_%u = compute(value_%u, %u); /* filler */\n",
					      line, line / 2, line % 97);
	}
	*len = o;
	return b;
}

/* The name of the filesystem dir is on. */
static const char *fs_name(const char *dir)
{
	struct statfs sf;
	if (statfs(dir, &sf) < 0)
		return "unknown";
	switch ((unsigned long)sf.f_type) {
	case TMPFS_MAGIC:
		return "tmpfs";
	case EXT4_SUPER_MAGIC: /* ext2/3/4 share it */
		return "ext4";
	case XFS_SUPER_MAGIC:
		return "xfs";
	case BTRFS_SUPER_MAGIC:
		return "btrfs";
	case OVERLAYFS_SUPER_MAGIC:
		return "overlayfs";
	case NFS_SUPER_MAGIC:
		return "nfs";
	case F2FS_SUPER_MAGIC:
		return "f2fs";
	default:
		return "other";
	}
}

static int64_t edit_once(cae_editor *ed, json_t *args)
{
	cae_editor_result r;
	int64_t t = cae__now_ns();
	if (cae_editor_call(ed, args, &r) < 0 || r.is_error)
		die(r.text ? r.text : "edit failed");
	t = cae__now_ns() - t;
	cae_editor_result_clear(&r);
	return t;
}

/* Runs fn in a child and returns the child's peak RSS in KiB. */
static long child_peak(void (*fn)(const char *), const char *dir)
{
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		fn(dir);
		_exit(0);
	}
	int st;
	struct rusage ru;
	if (wait4(pid, &st, 0, &ru) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		die("child failed");
	return ru.ru_maxrss;
}

static void rss_edits(const char *dir)
{
	cae_editor *ed = cae_editor_new(dir, "/workspace/project", NULL, NULL);
	if (!ed)
		die("editor");
	json_t *fwd = json_pack("{s:s, s:s, s:s, s:s}", "command", "str_replace", "path", "big.txt",
				"old_str", "MARKER_A", "new_str", "MARKER_B");
	json_t *back = json_pack("{s:s, s:s, s:s, s:s}", "command", "str_replace", "path",
				 "big.txt", "old_str", "MARKER_B", "new_str", "MARKER_A");
	for (int i = 0; i < EDITS; i++)
		edit_once(ed, i % 2 ? back : fwd);
	json_decref(fwd);
	json_decref(back);
	cae_editor_free(ed);
}

static void rss_read_once(const char *dir)
{
	char *p = cae__path_join(dir, "big.txt"), *data = NULL;
	size_t len;
	if (!p || cae__read_file(AT_FDCWD, p, 64u << 20, &data, &len) < 0)
		die("read");
	free(data);
	free(p);
}

int main(void)
{
	const char *ns = getenv("BENCH_N");
	int n = ns ? (int)strtol(ns, NULL, 10) : 10000;
	if (n < 1)
		n = 1;
	const char *base = getenv("TMPDIR");
	char tmpl[4096];
	snprintf(tmpl, sizeof(tmpl), "%s/cae-bench-editor-XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(tmpl))
		die("mkdtemp");
	const char *dir = tmpl;

	/* 1. view of a 51-line file. */
	char small[8192];
	size_t so = 0;
	for (int i = 1; i <= 51; i++)
		so += (size_t)snprintf(small + so, sizeof(small) - so,
				       "    line %d of a small Python module  # comment\n", i);
	char *sp = cae__path_join(dir, "small.py");
	if (!sp || cae__write_file_atomic(AT_FDCWD, sp, small, so, 0644, false) < 0)
		die("write small");
	cae_editor *ed = cae_editor_new(dir, "/workspace/project", NULL, NULL);
	if (!ed)
		die("editor");
	json_t *view =
	    json_pack("{s:s, s:s}", "command", "view", "path", "/workspace/project/small.py");
	int64_t *a = calloc((size_t)n, sizeof(int64_t)), *b = calloc((size_t)n, sizeof(int64_t));
	if (!a || !b)
		die("out of memory");
	char rbuf[16384];
	for (int i = 0; i < n; i++) {
		int64_t t = cae__now_ns();
		int fd = open(sp, O_RDONLY | O_CLOEXEC);
		ssize_t got = fd >= 0 ? read(fd, rbuf, sizeof(rbuf)) : -1;
		if (fd >= 0)
			close(fd);
		b[i] = cae__now_ns() - t;
		if (got != (ssize_t)so)
			die("baseline read");
		cae_editor_result r;
		t = cae__now_ns();
		if (cae_editor_call(ed, view, &r) < 0 || r.is_error)
			die("view failed");
		a[i] = cae__now_ns() - t;
		cae_editor_result_clear(&r);
	}
	printf(
	    "editor.view_51_lines_us median=%.1f target<=100 baseline(open+read+close)=%.1f n=%d\n",
	    median(a, n) / 1000.0, median(b, n) / 1000.0, n);
	json_decref(view);

	/* 2. str_replace on a 10 MB file. */
	size_t blen;
	char *big = make_big(&blen);
	char *bp = cae__path_join(dir, "big.txt");
	if (!bp || cae__write_file_atomic(AT_FDCWD, bp, big, blen, 0644, false) < 0)
		die("write big");
	json_t *fwd = json_pack("{s:s, s:s, s:s, s:s}", "command", "str_replace", "path", "big.txt",
				"old_str", "MARKER_A", "new_str", "MARKER_B");
	json_t *back = json_pack("{s:s, s:s, s:s, s:s}", "command", "str_replace", "path",
				 "big.txt", "old_str", "MARKER_B", "new_str", "MARKER_A");
	const char *es = getenv("BENCH_EDITS");
	int edits = es ? (int)strtol(es, NULL, 10) : EDITS;
	if (edits < 1)
		edits = 1;
	int64_t *ea = calloc((size_t)edits, sizeof(int64_t)),
		*eb = calloc((size_t)edits, sizeof(int64_t)),
		*ed_minus_base = calloc((size_t)edits, sizeof(int64_t));
	if (!ea || !eb || !ed_minus_base)
		die("out of memory");
	char *copy = malloc(blen);
	char *cp = cae__path_join(dir, "copy.txt");
	if (!copy || !cp)
		die("out of memory");
	for (int i = 0; i < edits; i++) {
		ea[i] = edit_once(ed, i % 2 ? back : fwd);
		int64_t t = cae__now_ns();
		memcpy(copy, big, blen);
		if (cae__write_file_atomic(AT_FDCWD, cp, copy, blen, 0644, false) < 0)
			die("baseline write");
		eb[i] = cae__now_ns() - t;
		ed_minus_base[i] = ea[i] - eb[i];
	}
	/* beyond_baseline: the median of (edit - baseline) over the pairs, each pair measured
	 * back to back (steadier than the difference of the medians on a busy machine). */
	printf("editor.str_replace_10mb_ms median=%.2f target<=15 "
	       "baseline(memcpy+atomic write with fsync)=%.2f beyond_baseline=%.2f fs=%s "
	       "size=%zu n=%d\n",
	       median(ea, edits) / 1e6, median(eb, edits) / 1e6, median(ed_minus_base, edits) / 1e6,
	       fs_name(dir), blen, edits);
	free(ea);
	free(eb);
	free(ed_minus_base);
	json_decref(fwd);
	json_decref(back);
	cae_editor_free(ed);
	free(copy);
	free(big);

	/* 3. Peak RSS over 20 edits, in fresh children. */
	long rss = child_peak(rss_edits, dir), rss_base = child_peak(rss_read_once, dir);
	printf("editor.peak_rss_20_edits_10mb_mib peak=%.1f target<=100 baseline(read once)=%.1f\n",
	       rss / 1024.0, rss_base / 1024.0);

	cae__rm_rf(dir);
	free(sp);
	free(bp);
	free(cp);
	free(a);
	free(b);
	return 0;
}
