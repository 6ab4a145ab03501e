/* Tests of base/chase.h (and base/fs.h's atomic writer), written as an attacker would: every
 * way out of the root a path or a symbolic link could take must end in an error, and nothing
 * outside the root may be read, made or written. */
#include "base/chase.h"
#include "base/fs.h"
#include "base/macro.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>

/* ---------------------------------------------------------------------------------------- */
/* The lexical pass */

/* cae__path_lexical on a C string; *out new or NULL. */
static int lex(const char *root, const char *base, const char *path, unsigned flags, char **out)
{
	return cae__path_lexical(root, base, path, strlen(path), flags, out);
}

static void lex_ok(const char *root, const char *base, const char *path, unsigned flags,
		   const char *want)
{
	char *out = NULL;
	int r = lex(root, base, path, flags, &out);
	ck_assert_msg(r == 0, "%s under %s: %d", path, root, r);
	ck_assert_msg(strcmp(out, want) == 0, "%s under %s: got '%s', want '%s'", path, root, out,
		      want);
	free(out);
}

static void lex_err(const char *root, const char *base, const char *path, unsigned flags, int e)
{
	char *out = NULL;
	int r = lex(root, base, path, flags, &out);
	ck_assert_msg(r == e, "%s under %s: got %d, want %d", path, root, r, e);
	ck_assert_ptr_null(out);
}

START_TEST(lexical_forms)
{
	lex_ok("/w/p", NULL, "a.txt", 0, "a.txt");
	lex_ok("/w/p", NULL, "./a//b/./c.txt", 0, "a/b/c.txt");
	lex_ok("/w/p", NULL, "a/b/", 0, "a/b");
	lex_ok("/w/p", NULL, "/w/p/src/x.py", 0, "src/x.py");
	lex_ok("/w/p", NULL, "//w//p//./src/", 0, "src");
	lex_ok("/w/p", NULL, "/w/p", 0, "");
	lex_ok("/w/p", NULL, ".", 0, "");
	lex_ok("/w/p", NULL, "./", 0, "");
	lex_ok("/", NULL, "/etc/x", 0, "etc/x");
	lex_ok("/w/p/", NULL, "/w/p/a", 0, "a"); /* the root's own trailing slash */
	/* absolute output */
	lex_ok("/w/p", NULL, "a/b", CAE_PATH_ABSOLUTE, "/w/p/a/b");
	lex_ok("/w/p", NULL, "/w/p", CAE_PATH_ABSOLUTE, "/w/p");
	lex_ok("/", NULL, ".", CAE_PATH_ABSOLUTE, "/");
	/* a base for relative paths; absolute ones still start at the root */
	lex_ok("/w", "/w/p", "src", 0, "p/src");
	lex_ok("/w", "/w/p", "/w/tmp/x", 0, "tmp/x");
	lex_ok("/", "/w/p", "../tmp", CAE_PATH_FOLD_DOTDOT | CAE_PATH_ABSOLUTE, "/w/tmp");
	/* backslashes, when asked for */
	lex_ok("/w/p", NULL, "a\\b", 0, "a\\b");
	lex_ok("/w/p", NULL, "a\\b", CAE_PATH_BACKSLASH, "a/b");
	lex_ok("/w/p", NULL, "\\w\\p\\a", CAE_PATH_BACKSLASH, "a");
}
END_TEST

START_TEST(lexical_dotdot)
{
	/* By default ".." is left for the resolver, which follows it physically. */
	lex_ok("/w/p", NULL, "x/../y", 0, "x/../y");
	lex_ok("/w/p", NULL, "../outside", 0, "../outside");
	lex_ok("/w/p", NULL, "/w/p/../../etc", 0, "../../etc");
	/* Folded: never above the root, an error rather than a clamp. */
	lex_ok("/w/p", NULL, "x/../y", CAE_PATH_FOLD_DOTDOT, "y");
	lex_ok("/w/p", NULL, "a/b/../../c", CAE_PATH_FOLD_DOTDOT, "c");
	lex_ok("/w/p", NULL, "a/..", CAE_PATH_FOLD_DOTDOT, "");
	lex_err("/w/p", NULL, "..", CAE_PATH_FOLD_DOTDOT, -EXDEV);
	lex_err("/w/p", NULL, "../p/x", CAE_PATH_FOLD_DOTDOT, -EXDEV);
	lex_err("/w/p", NULL, "a/../../x", CAE_PATH_FOLD_DOTDOT, -EXDEV);
	lex_err("/w/p", NULL, "/w/p/..", CAE_PATH_FOLD_DOTDOT, -EXDEV);
	lex_err("/", NULL, "/..", CAE_PATH_FOLD_DOTDOT, -EXDEV);
	lex_err("/", "/w/p", "../../..", CAE_PATH_FOLD_DOTDOT, -EXDEV);
	lex_ok("/", "/w/p", "../..", CAE_PATH_FOLD_DOTDOT | CAE_PATH_ABSOLUTE, "/");
	lex_err("/", NULL, "a\\..\\..\\..", CAE_PATH_FOLD_DOTDOT | CAE_PATH_BACKSLASH, -EXDEV);
	/* Refused outright. */
	const char *dd[] = {"..", "../x", "a/../b", "a/..", "/w/p/..", "/w/p/a/../b"};
	for (size_t i = 0; i < ARRAY_SIZE(dd); i++)
		lex_err("/w/p", NULL, dd[i], CAE_PATH_NO_DOTDOT, -EACCES);
	/* "..." and "..x" are names. */
	lex_ok("/w/p", NULL, ".../..x", CAE_PATH_NO_DOTDOT, ".../..x");
	/* The root's components are compared as written: no ".." folded into them. */
	lex_err("/w/p", NULL, "/w/../w/p/a", 0, -EXDEV);
	lex_err("/w/p", NULL, "/w/../w/p/a", CAE_PATH_FOLD_DOTDOT, -EXDEV);
}
END_TEST

START_TEST(lexical_refusals)
{
	lex_err("/w/p", NULL, "", 0, -ENOENT);
	char *out = NULL;
	ck_assert_int_eq(cae__path_lexical("/w/p", NULL, NULL, 0, 0, &out), -ENOENT);
	ck_assert_int_eq(cae__path_lexical("/w/p", NULL, "a\0b", 3, 0, &out), -EINVAL);
	ck_assert_int_eq(cae__path_lexical("/w/p", NULL, "/w/p\0/x", 7, 0, &out), -EINVAL);
	ck_assert_ptr_null(out);
	/* length: CAE_PATH_MAX bytes pass, one more does not */
	char *longp = malloc(CAE_PATH_MAX + 2);
	memset(longp, 'a', CAE_PATH_MAX + 1);
	for (size_t i = 100; i < CAE_PATH_MAX; i += 101)
		longp[i] = '/';
	longp[CAE_PATH_MAX + 1] = '\0';
	ck_assert_int_eq(cae__path_lexical("/w", NULL, longp, CAE_PATH_MAX, 0, &out), 0);
	free(out);
	ck_assert_int_eq(cae__path_lexical("/w", NULL, longp, CAE_PATH_MAX + 1, 0, &out),
			 -ENAMETOOLONG);
	free(longp);
	/* UTF-8, when asked for */
	lex_ok("/w/p", NULL, "\xff", 0, "\xff");
	lex_err("/w/p", NULL, "\xff", CAE_PATH_UTF8, -EILSEQ);
	lex_err("/w/p", NULL, "caf\xc3", CAE_PATH_UTF8, -EILSEQ);
	lex_ok("/w/p", NULL, "caf\xc3\xa9", CAE_PATH_UTF8, "caf\xc3\xa9");
	/* outside the root */
	const char *outside[] = {"/etc/x", "/w/px/a", "/w", "/", "/proc/self/root/w/p/a"};
	for (size_t i = 0; i < ARRAY_SIZE(outside); i++)
		lex_err("/w/p", NULL, outside[i], 0, -EXDEV);
	/* the caller's own mistakes */
	lex_err("w/p", NULL, "a", 0, -EINVAL);
	lex_err("/w/p", "/elsewhere", "a", 0, -EINVAL);
	lex_err("/w/p", "rel", "a", 0, -EINVAL);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* The resolver */

/* A root "ws" and, beside it, "outside" with a secret; the root is what we resolve in. */
typedef struct fx {
	char *top, *ws, *outside;
	int root;
} fx;

static void fx_init(fx *f)
{
	f->top = tu_mkdtemp();
	f->ws = cae__path_join(f->top, "ws");
	f->outside = cae__path_join(f->top, "outside");
	ck_assert_int_eq(mkdir(f->ws, 0755), 0);
	ck_assert_int_eq(mkdir(f->outside, 0755), 0);
	tu_write(f->outside, "secret.txt", "outside\n");
	tu_sh("mkdir -p '%s/dir' '%s/sub/deeper'", f->outside, f->ws);
	tu_write(f->ws, "f", "inside\n");
	f->root = open(f->ws, O_PATH | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(f->root, 0);
}

static void fx_free(fx *f)
{
	close(f->root);
	cae__rm_rf(f->top);
	free(f->top);
	free(f->ws);
	free(f->outside);
}

/* A symbolic link at rel (in the root) to target. */
static void fx_link(fx *f, const char *target, const char *rel)
{
	ck_assert_msg(symlinkat(target, f->root, rel) == 0, "symlink %s", rel);
}

/* Whether rel exists (not following) in outside. */
static bool outside_has(fx *f, const char *rel)
{
	_cleanup_free_ char *p = cae__path_join(f->outside, rel);
	struct stat st;
	return lstat(p, &st) == 0;
}

static int chase(fx *f, const char *path, unsigned flags, cae_chased *c)
{
	return cae__chase(f->root, path, flags, NULL, NULL, c);
}

/* Every flag combination that follows a final link refuses path with e. */
static void refused_following(fx *f, const char *path, int e)
{
	const unsigned combos[] = {0, CAE_CHASE_PARENT, CAE_CHASE_MKDIR,
				   CAE_CHASE_PARENT | CAE_CHASE_MKDIR};
	for (size_t i = 0; i < ARRAY_SIZE(combos); i++) {
		cae_chased c = CAE_CHASED_INIT;
		int r = chase(f, path, combos[i], &c);
		ck_assert_msg(r == e, "%s (flags %u): got %d, want %d", path, combos[i], r, e);
		ck_assert_int_eq(c.fd, -1);
		cae__chased_clear(&c);
	}
}

/* Every flag combination refuses path with e. */
static void refused(fx *f, const char *path, int e)
{
	const unsigned combos[] = {0,
				   CAE_CHASE_PARENT,
				   CAE_CHASE_NOFOLLOW,
				   CAE_CHASE_PARENT | CAE_CHASE_NOFOLLOW,
				   CAE_CHASE_MKDIR,
				   CAE_CHASE_PARENT | CAE_CHASE_MKDIR};
	for (size_t i = 0; i < ARRAY_SIZE(combos); i++) {
		cae_chased c = CAE_CHASED_INIT;
		int r = chase(f, path, combos[i], &c);
		ck_assert_msg(r == e, "%s (flags %u): got %d, want %d", path, combos[i], r, e);
		ck_assert_int_eq(c.fd, -1);
		cae__chased_clear(&c);
	}
}

/* The inode of rel in the root (following). */
static ino_t ino_of(fx *f, const char *rel)
{
	struct stat st;
	ck_assert_int_eq(fstatat(f->root, rel, &st, 0), 0);
	return st.st_ino;
}

static ino_t fd_ino(int fd)
{
	struct stat st;
	ck_assert_int_eq(fstat(fd, &st), 0);
	return st.st_ino;
}

START_TEST(chase_plain)
{
	fx f;
	fx_init(&f);
	cae_chased c = CAE_CHASED_INIT;
	ck_assert_int_eq(chase(&f, "sub/deeper", 0, &c), 0);
	ck_assert_str_eq(c.dir, "sub");
	ck_assert_str_eq(c.name, "deeper");
	ck_assert(c.exists && S_ISDIR(c.st.st_mode));
	ck_assert_uint_eq(fd_ino(c.fd), ino_of(&f, "sub/deeper"));
	cae__chased_clear(&c);
	ck_assert_int_eq(c.fd, -1);
	/* parent only: the directory and the name, which may be missing */
	ck_assert_int_eq(chase(&f, "sub/new.txt", CAE_CHASE_PARENT, &c), 0);
	ck_assert_str_eq(c.dir, "sub");
	ck_assert_str_eq(c.name, "new.txt");
	ck_assert(!c.exists);
	ck_assert_uint_eq(fd_ino(c.fd), ino_of(&f, "sub"));
	cae__chased_clear(&c);
	ck_assert_int_eq(chase(&f, "f", CAE_CHASE_PARENT, &c), 0);
	ck_assert_str_eq(c.dir, "");
	ck_assert(c.exists && S_ISREG(c.st.st_mode));
	cae__chased_clear(&c);
	/* without it, the target must exist */
	ck_assert_int_eq(chase(&f, "sub/new.txt", 0, &c), -ENOENT);
	ck_assert_int_eq(chase(&f, "nodir/new.txt", CAE_CHASE_PARENT, &c), -ENOENT);
	ck_assert_int_eq(chase(&f, "f/x", CAE_CHASE_PARENT, &c), -ENOTDIR);
	/* ".." that stays inside is the kernel's to resolve, and folded in the result */
	ck_assert_int_eq(chase(&f, "sub/deeper/../../f", CAE_CHASE_PARENT, &c), 0);
	ck_assert_str_eq(c.dir, "");
	ck_assert_str_eq(c.name, "f");
	ck_assert_uint_eq(fd_ino(c.fd), ino_of(&f, "."));
	cae__chased_clear(&c);
	fx_free(&f);
}
END_TEST

START_TEST(chase_dotdot_escapes)
{
	fx f;
	fx_init(&f);
	refused(&f, "..", -EXDEV);
	refused(&f, "../outside/secret.txt", -EXDEV);
	refused(&f, "sub/../../outside/secret.txt", -EXDEV);
	refused(&f, "sub/deeper/../../../outside/dir/x", -EXDEV);
	fx_free(&f);
}
END_TEST

START_TEST(chase_absolute)
{
	fx f;
	fx_init(&f);
	/* Absolute paths and absolute links lead out by definition, even to the root itself. */
	refused(&f, "/", -EXDEV);
	refused(&f, "/etc/passwd", -EXDEV);
	_cleanup_free_ char *inside = cae__path_join(f.ws, "f");
	refused(&f, inside, -EXDEV);
	fx_link(&f, "/etc/passwd", "abs");
	fx_link(&f, inside, "abs_inside");
	fx_link(&f, "/", "rootlink");
	_cleanup_free_ char *secret = cae__path_join(f.outside, "secret.txt");
	fx_link(&f, secret, "secret_link");
	const unsigned follow[] = {0, CAE_CHASE_PARENT, CAE_CHASE_PARENT | CAE_CHASE_MKDIR};
	for (size_t i = 0; i < ARRAY_SIZE(follow); i++) {
		cae_chased c = CAE_CHASED_INIT;
		ck_assert_int_eq(chase(&f, "abs", follow[i], &c), -EXDEV);
		ck_assert_int_eq(chase(&f, "abs_inside", follow[i], &c), -EXDEV);
		ck_assert_int_eq(chase(&f, "secret_link", follow[i], &c), -EXDEV);
		ck_assert_int_eq(chase(&f, "rootlink", follow[i], &c), -EXDEV);
		ck_assert_int_eq(c.fd, -1);
	}
	/* as an intermediate component the kernel refuses them */
	refused(&f, "rootlink/etc/passwd", -EXDEV);
	refused(&f, "rootlink/", -EXDEV);
	fx_free(&f);
}
END_TEST

START_TEST(chase_nofollow)
{
	fx f;
	fx_init(&f);
	fx_link(&f, "/etc/passwd", "abs");
	fx_link(&f, "f", "rel");
	cae_chased c = CAE_CHASED_INIT;
	/* The link itself is the target: the caller may remove or replace it, not follow. */
	ck_assert_int_eq(chase(&f, "abs", CAE_CHASE_PARENT | CAE_CHASE_NOFOLLOW, &c), 0);
	ck_assert(c.exists && S_ISLNK(c.st.st_mode));
	ck_assert_str_eq(c.name, "abs");
	ck_assert_uint_eq(c.links, 0);
	cae__chased_clear(&c);
	ck_assert_int_eq(chase(&f, "abs", CAE_CHASE_NOFOLLOW, &c), 0);
	struct stat st;
	ck_assert_int_eq(fstat(c.fd, &st), 0);
	ck_assert(S_ISLNK(st.st_mode));
	cae__chased_clear(&c);
	/* followed: a link inside leads to its target */
	ck_assert_int_eq(chase(&f, "rel", CAE_CHASE_PARENT, &c), 0);
	ck_assert_str_eq(c.name, "f");
	ck_assert_uint_eq(c.links, 1);
	ck_assert(S_ISREG(c.st.st_mode));
	cae__chased_clear(&c);
	/* a trailing slash asks for a directory, through a final link as the kernel does */
	ck_assert_int_eq(chase(&f, "rel/", CAE_CHASE_NOFOLLOW, &c), -ENOTDIR);
	fx_free(&f);
}
END_TEST

/* Links l<from>..l<to> in the root, each to the next, the last to "f". */
static void make_chain(fx *f, int from, int to)
{
	for (int i = from; i <= to; i++) {
		char name[32], target[32];
		snprintf(name, sizeof(name), "l%d", i);
		if (i == to)
			snprintf(target, sizeof(target), "f");
		else
			snprintf(target, sizeof(target), "l%d", i + 1);
		fx_link(f, target, name);
	}
}

START_TEST(chase_symlink_limit)
{
	fx f;
	fx_init(&f);
	/* l0 -> l1 -> ... -> l40 -> f: from l1, CAE_CHASE_SYMLINK_MAX links; from l0, one more. */
	make_chain(&f, 0, CAE_CHASE_SYMLINK_MAX);
	char first[32];
	snprintf(first, sizeof(first), "l%d", 1);
	cae_chased c = CAE_CHASED_INIT;
	ck_assert_int_eq(chase(&f, first, CAE_CHASE_PARENT, &c), 0);
	ck_assert_uint_eq(c.links, CAE_CHASE_SYMLINK_MAX);
	ck_assert_str_eq(c.name, "f");
	cae__chased_clear(&c);
	ck_assert_int_eq(chase(&f, "l0", CAE_CHASE_PARENT, &c), -ELOOP);
	ck_assert_int_eq(chase(&f, "l0", 0, &c), -ELOOP);
	/* loops */
	fx_link(&f, "self", "self");
	fx_link(&f, "loop_b", "loop_a");
	fx_link(&f, "loop_a", "loop_b");
	fx_link(&f, "../sub/dl", "sub/dl"); /* through ".." back to itself */
	refused_following(&f, "self", -ELOOP);
	refused_following(&f, "loop_a", -ELOOP);
	refused_following(&f, "sub/dl", -ELOOP);
	refused(&f, "loop_a/x", -ELOOP); /* an intermediate loop: the kernel's limit */
	/* NOFOLLOW stops at the first link */
	ck_assert_int_eq(chase(&f, "loop_a", CAE_CHASE_NOFOLLOW, &c), 0);
	cae__chased_clear(&c);
	fx_free(&f);
}
END_TEST

START_TEST(chase_relative_links)
{
	fx f;
	fx_init(&f);
	fx_link(&f, "../f", "sub/up_f");
	fx_link(&f, "..", "sub/up");
	fx_link(&f, "..", "up");
	fx_link(&f, "../../outside", "sub/out");
	fx_link(&f, "../outside/secret.txt", "dangling_out");
	fx_link(&f, "sub/deeper", "dl");
	fx_link(&f, "../g", "sub/deeper/up_g");
	tu_write(f.ws, "sub/g", "sub's g\n");
	cae_chased c = CAE_CHASED_INIT;
	/* a link's target is taken from the link's directory, and named without ".." */
	ck_assert_int_eq(chase(&f, "sub/up_f", CAE_CHASE_PARENT, &c), 0);
	ck_assert_str_eq(c.dir, "");
	ck_assert_str_eq(c.name, "f");
	cae__chased_clear(&c);
	/* a final ".." is the directory itself */
	ck_assert_int_eq(chase(&f, "sub/up", CAE_CHASE_PARENT, &c), 0);
	ck_assert_str_eq(c.name, "");
	ck_assert_str_eq(c.dir, "");
	ck_assert_uint_eq(fd_ino(c.fd), ino_of(&f, "."));
	cae__chased_clear(&c);
	refused_following(&f, "up", -EXDEV);
	refused_following(&f, "sub/out", -EXDEV);
	refused(&f, "sub/out/secret.txt", -EXDEV);
	refused_following(&f, "dangling_out", -EXDEV);
	/* dl/up_g is sub/deeper/../g = sub/g physically, not the lexical "g" (which does not
	 * exist): the name given back must name that same file */
	ck_assert_int_eq(chase(&f, "dl/up_g", CAE_CHASE_PARENT, &c), 0);
	ck_assert_str_eq(c.name, "g");
	ck_assert_uint_eq(fd_ino(c.fd), ino_of(&f, "sub"));
	_cleanup_free_ char *again = cae__path_join(c.dir, c.name);
	ck_assert_uint_eq(ino_of(&f, again), ino_of(&f, "sub/g"));
	cae__chased_clear(&c);
	fx_free(&f);
}
END_TEST

START_TEST(chase_trailing_and_empty)
{
	fx f;
	fx_init(&f);
	const char *roots[] = {"", ".", "./", ".//.", "sub/.."};
	for (size_t i = 0; i < ARRAY_SIZE(roots); i++) {
		const unsigned flags[] = {0, CAE_CHASE_PARENT, CAE_CHASE_NOFOLLOW};
		for (size_t k = 0; k < ARRAY_SIZE(flags); k++) {
			cae_chased c = CAE_CHASED_INIT;
			ck_assert_msg(chase(&f, roots[i], flags[k], &c) == 0, "'%s'", roots[i]);
			ck_assert_str_eq(c.dir, "");
			ck_assert_str_eq(c.name, ""); /* parent-only on the root: the root itself */
			ck_assert(c.exists && S_ISDIR(c.st.st_mode));
			ck_assert_uint_eq(fd_ino(c.fd), ino_of(&f, "."));
			cae__chased_clear(&c);
		}
	}
	cae_chased c = CAE_CHASED_INIT;
	ck_assert_int_eq(cae__chase(f.root, NULL, 0, NULL, NULL, &c), -EINVAL);
	const char *subs[] = {"sub/", "sub//", "sub/.", "sub/./", "./sub//./"};
	for (size_t i = 0; i < ARRAY_SIZE(subs); i++) {
		ck_assert_msg(chase(&f, subs[i], CAE_CHASE_PARENT, &c) == 0, "%s", subs[i]);
		ck_assert_str_eq(c.dir, "sub");
		ck_assert_str_eq(c.name, "");
		ck_assert_uint_eq(fd_ino(c.fd), ino_of(&f, "sub"));
		cae__chased_clear(&c);
	}
	ck_assert_int_eq(chase(&f, "f/", CAE_CHASE_PARENT, &c), -ENOTDIR);
	ck_assert_int_eq(chase(&f, "f/.", 0, &c), -ENOTDIR);
	ck_assert_int_eq(chase(&f, "missing/", CAE_CHASE_PARENT, &c), -ENOENT);
	fx_free(&f);
}
END_TEST

START_TEST(chase_long_names)
{
	fx f;
	fx_init(&f);
	char name[NAME_MAX + 2];
	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	cae_chased c = CAE_CHASED_INIT;
	ck_assert_int_eq(chase(&f, name, CAE_CHASE_PARENT, &c), -ENAMETOOLONG);
	name[NAME_MAX] = '\0';
	ck_assert_int_eq(chase(&f, name, CAE_CHASE_PARENT, &c), 0); /* the longest name: fine */
	ck_assert(!c.exists);
	cae__chased_clear(&c);
	char *longp = malloc(PATH_MAX + 1);
	memset(longp, 'a', PATH_MAX);
	for (size_t i = 1; i < PATH_MAX; i += 2)
		longp[i] = '/';
	longp[PATH_MAX] = '\0';
	ck_assert_int_eq(chase(&f, longp, CAE_CHASE_PARENT | CAE_CHASE_MKDIR, &c), -ENAMETOOLONG);
	free(longp);
	/* a link whose target makes the path too long */
	char *t = malloc(PATH_MAX);
	memset(t, 'b', PATH_MAX - 1);
	for (size_t i = 1; i < PATH_MAX - 1; i += 2)
		t[i] = '/';
	t[PATH_MAX - 1] = '\0';
	fx_link(&f, t, "sub/deeper/longlink");
	free(t);
	ck_assert_int_eq(chase(&f, "sub/deeper/longlink", CAE_CHASE_PARENT, &c), -ENAMETOOLONG);
	fx_free(&f);
}
END_TEST

/* A mkdir hook that records the paths it is given, then makes them. */
typedef struct made {
	char paths[8][64];
	int n;
} made;

static int record_mkdir(void *ctx, int dfd, const char *name, const char *path)
{
	made *m = ctx;
	if (m->n < 8)
		snprintf(m->paths[m->n++], sizeof(m->paths[0]), "%s", path);
	return mkdirat(dfd, name, 0700) < 0 ? -errno : 0;
}

START_TEST(chase_mkdir)
{
	fx f;
	fx_init(&f);
	cae_chased c = CAE_CHASED_INIT;
	/* parent only: the directories, not the last name */
	ck_assert_int_eq(chase(&f, "n1/n2/file.txt", CAE_CHASE_PARENT | CAE_CHASE_MKDIR, &c), 0);
	ck_assert_str_eq(c.dir, "n1/n2");
	ck_assert_str_eq(c.name, "file.txt");
	ck_assert(!c.exists);
	ck_assert_uint_eq(fd_ino(c.fd), ino_of(&f, "n1/n2"));
	cae__chased_clear(&c);
	struct stat st;
	ck_assert_int_eq(fstatat(f.root, "n1/n2/file.txt", &st, 0), -1);
	/* the whole path: mkdir -p */
	ck_assert_int_eq(chase(&f, "m1/m2/m3", CAE_CHASE_MKDIR, &c), 0);
	ck_assert(S_ISDIR(c.st.st_mode));
	ck_assert_uint_eq(fd_ino(c.fd), ino_of(&f, "m1/m2/m3"));
	cae__chased_clear(&c);
	/* the hook is given each directory's path, outermost first */
	made m = {0};
	ck_assert_int_eq(
	    cae__chase(f.root, "h1/h2/x", CAE_CHASE_PARENT | CAE_CHASE_MKDIR, record_mkdir, &m, &c),
	    0);
	cae__chased_clear(&c);
	ck_assert_int_eq(m.n, 2);
	ck_assert_str_eq(m.paths[0], "h1");
	ck_assert_str_eq(m.paths[1], "h1/h2");
	ck_assert_int_eq(fstatat(f.root, "h1/h2", &st, 0), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0700);
	/* through a link that stays inside: made in its target */
	fx_link(&f, "sub", "inlink");
	ck_assert_int_eq(chase(&f, "inlink/new/x", CAE_CHASE_PARENT | CAE_CHASE_MKDIR, &c), 0);
	cae__chased_clear(&c);
	ck_assert_int_eq(fstatat(f.root, "sub/new", &st, 0), 0);
	/* through a link that leads out: nothing made, there or here */
	fx_link(&f, "../outside/dir", "outlink");
	fx_link(&f, "../outside", "outtop");
	refused(&f, "outlink/new/x", -EXDEV);
	refused(&f, "outtop/made/deeper/x", -EXDEV);
	refused(&f, "outtop/", -EXDEV);
	ck_assert(!outside_has(&f, "dir/new"));
	ck_assert(!outside_has(&f, "made"));
	/* never on a path with "..": a directory made only to climb back out of it */
	ck_assert_int_eq(chase(&f, "x/../y/f", CAE_CHASE_PARENT | CAE_CHASE_MKDIR, &c), -ENOENT);
	ck_assert_int_eq(fstatat(f.root, "x", &st, 0), -1);
	ck_assert_int_eq(fstatat(f.root, "y", &st, 0), -1);
	refused(&f, "../outside/newdir/f", -EXDEV);
	ck_assert(!outside_has(&f, "newdir"));
	/* never on a link's target */
	fx_link(&f, "nodir/f", "dangling");
	ck_assert_int_eq(chase(&f, "dangling", CAE_CHASE_PARENT | CAE_CHASE_MKDIR, &c), -ENOENT);
	ck_assert_uint_eq(c.links, 1); /* the caller can tell a dangling link */
	cae__chased_clear(&c);
	ck_assert_int_eq(fstatat(f.root, "nodir", &st, 0), -1);
	/* a file on the way */
	ck_assert_int_eq(chase(&f, "f/x/y", CAE_CHASE_PARENT | CAE_CHASE_MKDIR, &c), -ENOTDIR);
	fx_free(&f);
}
END_TEST

START_TEST(chase_proc_magic_links)
{
	/* A root in /proc, where magic links abound: none may be followed. */
	int proc = open("/proc/self", O_PATH | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(proc, 0);
	cae_chased c = CAE_CHASED_INIT;
	const char *through[] = {"root/etc/passwd", "cwd/x", "fd/0/x", "exe/x"};
	for (size_t i = 0; i < ARRAY_SIZE(through); i++) {
		int r = cae__chase(proc, through[i], CAE_CHASE_PARENT, NULL, NULL, &c);
		ck_assert_msg(r == -ELOOP || r == -EXDEV || r == -ENOTDIR, "%s: %d", through[i], r);
		ck_assert_int_eq(c.fd, -1);
	}
	/* a final magic link names a file elsewhere: absolute, or a pseudo path */
	const char *final[] = {"root", "cwd", "exe", "fd/0"};
	for (size_t i = 0; i < ARRAY_SIZE(final); i++) {
		int r = cae__chase(proc, final[i], 0, NULL, NULL, &c);
		ck_assert_msg(r == -EXDEV || r == -ENOENT, "%s: %d", final[i], r);
		ck_assert_int_eq(c.fd, -1);
		/* not followed: the link itself */
		ck_assert_int_eq(cae__chase(proc, final[i], CAE_CHASE_PARENT | CAE_CHASE_NOFOLLOW,
					    NULL, NULL, &c),
				 0);
		ck_assert(S_ISLNK(c.st.st_mode));
		cae__chased_clear(&c);
	}
	close(proc);
	/* links inside a workspace to /proc, absolute or climbing */
	fx f;
	fx_init(&f);
	fx_link(&f, "/proc/self/root", "proc_root");
	fx_link(&f, "/proc/self/fd/0", "fdlink");
	fx_link(&f, "../../../../../../../../../../../../proc/self/root", "proc_up");
	refused_following(&f, "proc_root", -EXDEV);
	refused_following(&f, "fdlink", -EXDEV);
	refused_following(&f, "proc_up", -EXDEV);
	_cleanup_free_ char *through_root = NULL;
	ck_assert_int_ge(asprintf(&through_root, "proc_root%s/secret.txt", f.outside), 0);
	refused(&f, through_root, -EXDEV);
	fx_free(&f);
}
END_TEST

/* Swaps names a and b in dir (RENAME_EXCHANGE) until killed. */
static pid_t start_swapper(int dir, const char *a, const char *b)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		for (;;)
			(void)renameat2(dir, a, dir, b, RENAME_EXCHANGE);
	}
	return pid;
}

static void stop(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

START_TEST(chase_swap_race)
{
	/* A directory and a link to outside trade places as fast as they can while we
	 * resolve: every success must be the file inside, never the one outside. */
	fx f;
	fx_init(&f);
	tu_sh("mkdir '%s/realdir' && echo inside > '%s/realdir/secret.txt' && "
	      "echo inside > '%s/realfile'",
	      f.ws, f.ws, f.ws);
	fx_link(&f, "../outside", "evil");
	fx_link(&f, "../outside/secret.txt", "evilfile");
	ino_t in_dir = ino_of(&f, "realdir/secret.txt"), in_file = ino_of(&f, "realfile");
	pid_t sw1 = start_swapper(f.root, "realdir", "evil");
	pid_t sw2 = start_swapper(f.root, "realfile", "evilfile");
	int ok = 0, refusedn = 0;
	for (int i = 0; i < 3000; i++) {
		cae_chased c = CAE_CHASED_INIT;
		const char *p = i % 2 ? "realdir/secret.txt" : "realfile";
		int r = chase(&f, p, i % 3 ? CAE_CHASE_PARENT : 0, &c);
		if (r < 0) {
			ck_assert_msg(r == -EXDEV || r == -ENOENT || r == -ENOTDIR, "%s: %d", p, r);
			refusedn++;
			continue;
		}
		ino_t got;
		if (c.fd >= 0 && *c.name && (i % 3)) {
			/* parent only: what a caller then opens, without following */
			int fd = openat(c.fd, c.name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
			if (fd < 0) {
				cae__chased_clear(&c);
				refusedn++;
				continue;
			}
			got = fd_ino(fd);
			close(fd);
		} else {
			got = fd_ino(c.fd);
		}
		ck_assert_msg(got == (i % 2 ? in_dir : in_file), "%s led outside", p);
		ok++;
		cae__chased_clear(&c);
	}
	stop(sw1);
	stop(sw2);
	ck_assert_int_gt(ok + refusedn, 0);
	_cleanup_free_ char *secret = cae__path_join(f.outside, "secret.txt");
	char *data = NULL;
	ck_assert_int_eq(cae__read_file(AT_FDCWD, secret, 100, &data, NULL), 0);
	ck_assert_str_eq(data, "outside\n");
	free(data);
	fx_free(&f);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* The atomic writer */

typedef struct fill_args {
	const char *text;
	int fail; /* returned after writing */
} fill_args;

static int fill_text(void *ctx, int fd)
{
	const fill_args *a = ctx;
	int r = cae__write_all(fd, a->text, strlen(a->text));
	return r < 0 ? r : a->fail;
}

/* Entries of dir whose name starts with ".cae-tmp". */
static int tmp_files(const char *dir)
{
	DIR *d = opendir(dir);
	ck_assert_ptr_nonnull(d);
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		n += strncmp(de->d_name, ".cae-tmp", 8) == 0;
	closedir(d);
	return n;
}

static char *read_at(int dfd, const char *name)
{
	char *data = NULL;
	ck_assert_int_eq(cae__read_file(dfd, name, 1 << 20, &data, NULL), 0);
	return data;
}

START_TEST(write_atomic_one_writer)
{
	fx f;
	fx_init(&f);
	fill_args a = {"new\n", 0};
	/* through an O_PATH fd, as every resolved directory is */
	ck_assert_int_eq(cae__write_atomic(f.root, "w.txt", 0640, 0, fill_text, &a), 0);
	struct stat st;
	ck_assert_int_eq(fstatat(f.root, "w.txt", &st, 0), 0);
	ck_assert_int_eq(st.st_mode & 07777, 0640);
	_cleanup_free_ char *d1 = read_at(f.root, "w.txt");
	ck_assert_str_eq(d1, "new\n");
	/* NOREPLACE: an existing name stays as it is */
	fill_args b = {"other\n", 0};
	ck_assert_int_eq(
	    cae__write_atomic(f.root, "w.txt", 0644, CAE_WRITE_NOREPLACE, fill_text, &b), -EEXIST);
	_cleanup_free_ char *d2 = read_at(f.root, "w.txt");
	ck_assert_str_eq(d2, "new\n");
	ck_assert_int_eq(
	    cae__write_atomic(f.root, "fresh", 0644, CAE_WRITE_NOREPLACE, fill_text, &b), 0);
	/* a failing fill leaves the old file and no temporary file */
	fill_args c = {"half", -EIO};
	ck_assert_int_eq(cae__write_atomic(f.root, "w.txt", 0644, 0, fill_text, &c), -EIO);
	_cleanup_free_ char *d3 = read_at(f.root, "w.txt");
	ck_assert_str_eq(d3, "new\n");
	ck_assert_int_eq(tmp_files(f.ws), 0);
	/* a name is one component */
	ck_assert_int_eq(cae__write_atomic(f.root, "sub/x", 0644, 0, fill_text, &a), -EINVAL);
	ck_assert_int_eq(cae__write_atomic(f.root, "../x", 0644, 0, fill_text, &a), -EINVAL);
	ck_assert_int_eq(cae__write_atomic(f.root, "", 0644, 0, fill_text, &a), -EISDIR);
	ck_assert_int_eq(cae__write_atomic(f.root, "..", 0644, 0, fill_text, &a), -EISDIR);
	/* a link as the name is replaced, its target (outside) never written */
	fx_link(&f, "../outside/secret.txt", "link");
	ck_assert_int_eq(cae__write_atomic(f.root, "link", 0644, 0, fill_text, &a), 0);
	ck_assert_int_eq(fstatat(f.root, "link", &st, AT_SYMLINK_NOFOLLOW), 0);
	ck_assert(S_ISREG(st.st_mode));
	_cleanup_free_ char *secret = cae__path_join(f.outside, "secret.txt");
	char *data = NULL;
	ck_assert_int_eq(cae__read_file(AT_FDCWD, secret, 100, &data, NULL), 0);
	ck_assert_str_eq(data, "outside\n");
	free(data);
	ck_assert_int_eq(tmp_files(f.ws), 0);
	fx_free(&f);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("chase");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, lexical_forms);
	tcase_add_test(tc, lexical_dotdot);
	tcase_add_test(tc, lexical_refusals);
	tcase_add_test(tc, chase_plain);
	tcase_add_test(tc, chase_dotdot_escapes);
	tcase_add_test(tc, chase_absolute);
	tcase_add_test(tc, chase_nofollow);
	tcase_add_test(tc, chase_symlink_limit);
	tcase_add_test(tc, chase_relative_links);
	tcase_add_test(tc, chase_trailing_and_empty);
	tcase_add_test(tc, chase_long_names);
	tcase_add_test(tc, chase_mkdir);
	tcase_add_test(tc, chase_proc_magic_links);
	tcase_add_test(tc, chase_swap_race);
	tcase_add_test(tc, write_atomic_one_writer);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(make_suite());
}
