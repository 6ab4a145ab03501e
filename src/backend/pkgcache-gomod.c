/* Go modules' shared cache (pkgcache.h): a module proxy on disk that cae alone fills, with
 * `go mod download` of a project's go.mod and go.sum in a directory of its own (no task's
 * code, no task's configuration), read-only to every task, which reads it as the first
 * entry of its GOPROXY and checks what it reads against its own go.sum. */
#include "backend/backend-internal.h"
#include "backend/pkgcache.h"

#include "backend/sandbox.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/txn.h"
#include "cae/docker.h"
#include "cae/runner.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

#define FILL_TIMEOUT_MS (10 * 60 * 1000)
#define MANIFEST_MAX (8u << 20)
/* what Go uses when GOPROXY is not set */
#define DEFAULT_PROXY "https://proxy.golang.org,direct"

/* The operator's variables (cae's own environment) that the fill passes to go as they are:
 * where modules come from, which checksum database vouches for them, how to reach them. */
static const char *const operator_vars[] = {
    "GOSUMDB",	   "GONOSUMDB",	    "GOPRIVATE",    "GONOPROXY",  "GOINSECURE",
    "HTTPS_PROXY", "https_proxy",   "HTTP_PROXY",   "http_proxy", "NO_PROXY",
    "no_proxy",	   "SSL_CERT_FILE", "SSL_CERT_DIR",
}; /* (not GOVCS: the fill's is FILL_VCS) */

static const char *operator_proxy(void)
{
	const char *p = getenv("GOPROXY");
	return p && *p ? p : DEFAULT_PROXY;
}

static char gomod_env[4096];

static void gomod_env_once(void)
{
	snprintf(gomod_env, sizeof(gomod_env), "GOPROXY=file://" CAE_PKGCACHE_GO_MOD ",%s",
		 operator_proxy());
}

/* (made once: commands of many threads read it) */
const char *cae__pkgcache_gomod_env(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, gomod_env_once);
	return gomod_env;
}

int cae__pkgcache_path(const cae_config *cfg, const char *name, char *out, size_t size)
{
	char inst[CAE_CONFIG_INSTANCE_MAX];
	cae_config_instance(cfg, inst);
	int n = snprintf(out, size, "%s/package-cache/%s/%s", cfg->command_executor.state_dir, inst,
			 name);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int cae__pkgcache_shared_dir(const cae_config *cfg, const char *name, bool make, char *out,
			     size_t size, cae_error *err)
{
	if (!cfg->command_executor.package_cache.enabled)
		return 0;
	if (cae__pkgcache_path(cfg, name, out, size) < 0)
		return cae_error_set(err, -ENAMETOOLONG, "the package cache's path is too long");
	struct stat st;
	if (!make)
		return lstat(out, &st) == 0 && S_ISDIR(st.st_mode) ? 1 : 0;
	int r = cae__mkdir_p(out, 0755);
	if (r < 0 || lstat(out, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid())
		return cae_error_set(err, r < 0 ? r : -EPERM, "cannot make the package cache %s",
				     out);
	return 1;
}

int cae__pkgcache_gomod_dir(const cae_config *cfg, bool make, char *out, size_t size,
			    cae_error *err)
{
	return cae__pkgcache_shared_dir(cfg, "go-mod", make, out, size, err);
}

/* ---- the publication of a fill's downloads ---- */

/* What a module proxy serves of a version, complete: the version's .info, .mod and .zip
 * (go writes each under a temporary name and renames it once checked against go.sum or
 * the checksum database). Not `list`: the versions one fill saw, which would answer
 * @latest for every task from this cache. */
static bool served(const char *name)
{
	if (name[0] == '.')
		return false;
	const char *dot = strrchr(name, '.');
	return dot &&
	       (strcmp(dot, ".info") == 0 || strcmp(dot, ".mod") == 0 || strcmp(dot, ".zip") == 0);
}

/* An unnamed file of dir's (O_TMPFILE) linked in as name: 0, or -errno. */
static int link_unnamed(int fd, int ddfd, const char *name)
{
	if (linkat(fd, "", ddfd, name, AT_EMPTY_PATH) == 0)
		return 0;
	if (errno != ENOENT && errno != EPERM)
		return -errno;
	char proc[64]; /* without CAP_DAC_READ_SEARCH */
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, proc, ddfd, name, AT_SYMLINK_FOLLOW) < 0 ? -errno : 0;
}

int cae__pkgcache_publish_file(int sdfd, const char *name, int ddfd)
{
	if (faccessat(ddfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		return 0;
	_cleanup_close_ int in = openat(sdfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (in < 0)
		return -errno;
	/* an unnamed file, named once whole: a fill killed at any point leaves nothing here
	 * (where a file system has no O_TMPFILE, a temporary of this process's own name) */
	char tmp[NAME_MAX + 40] = "";
	int out = openat(ddfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0444);
	if (out < 0 && (errno == EOPNOTSUPP || errno == EISDIR)) {
		snprintf(tmp, sizeof(tmp), ".%d.%.200s.tmp", (int)getpid(), name);
		(void)unlinkat(ddfd, tmp, 0);
		out = openat(ddfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);
	}
	if (out < 0)
		return -errno;
	char buf[65536];
	ssize_t k;
	int r = 0;
	while (r == 0 && (k = read(in, buf, sizeof(buf))) != 0)
		r = k < 0 ? -errno : cae__write_all(out, buf, (size_t)k);
	if (r == 0 && (fchmod(out, 0444) < 0 || fsync(out) < 0))
		r = -errno;
	cae__txn_kill_point();
	if (r == 0 && !tmp[0] && (r = link_unnamed(out, ddfd, name)) == -EEXIST)
		r = 0;
	close(out);
	if (r == 0 && tmp[0] && linkat(ddfd, tmp, ddfd, name, 0) < 0 && errno != EEXIST)
		r = -errno;
	if (tmp[0])
		(void)unlinkat(ddfd, tmp, 0);
	return r;
}

/* The download tree under sdfd merged into ddfd (both consumed): directories made 0755,
 * cae's; served files published. */
static int publish_tree(int sdfd, int ddfd, int depth)
{
	DIR *d = fdopendir(sdfd);
	if (!d) {
		close(sdfd);
		close(ddfd);
		return -errno;
	}
	int r = 0;
	struct dirent *e;
	while (r == 0 && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		/* the checksum database's tiles: go's own, not a proxy's */
		if (depth == 0 && strcmp(e->d_name, "sumdb") == 0)
			continue;
		struct stat st;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISREG(st.st_mode) && served(e->d_name)) {
			r = cae__pkgcache_publish_file(dirfd(d), e->d_name, ddfd);
		} else if (S_ISDIR(st.st_mode) && depth < 64) {
			if (mkdirat(ddfd, e->d_name, 0755) < 0 && errno != EEXIST) {
				r = -errno;
				break;
			}
			int s, t;
			if ((r = cae__pkgcache_open_pair(dirfd(d), ddfd, e->d_name, &s, &t)) < 0)
				break;
			r = publish_tree(s, t, depth + 1);
		}
	}
	closedir(d);
	close(ddfd);
	return r;
}

/* ---- the fill ---- */

uint64_t cae__pkgcache_fnv1a(uint64_t h, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

bool cae__pkgcache_filled(const char *shared, uint64_t h, bool set)
{
	char p[PATH_MAX + 64];
	snprintf(p, sizeof(p), "%s/.filled", shared);
	if (set)
		(void)mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/.filled/%016llx", shared, (unsigned long long)h);
	if (!set)
		return access(p, F_OK) == 0;
	int fd = open(p, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0444);
	if (fd >= 0)
		close(fd);
	return fd >= 0;
}

void cae__pkgcache_used(const char *shared)
{
	char used[PATH_MAX + 16];
	snprintf(used, sizeof(used), "%s/.used", shared);
	int fd = open(used, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0444);
	if (fd >= 0) {
		futimens(fd, NULL);
		close(fd);
	}
}

int cae__pkgcache_fill_dirs(const cae_config *cfg, const char *name, const char *fill_name,
			    char shared[PATH_MAX], char fill[PATH_MAX], cae_error *err)
{
	int r = cae__pkgcache_shared_dir(cfg, name, true, shared, PATH_MAX, err);
	if (r <= 0)
		return r;
	if (cae__pkgcache_path(cfg, fill_name, fill, PATH_MAX) < 0)
		return cae_error_set(err, -ENAMETOOLONG, "the package cache's path is too long");
	/* used by this prepare, filled or not (the prune's age) */
	cae__pkgcache_used(shared);
	/* the fill's own files are out of the bound tree (0700) */
	if (mkdir(fill, 0700) < 0 && errno != EEXIST)
		return cae_error_set(err, -errno, "cannot make %s: %s", fill, strerror(errno));
	return 1;
}

int cae__pkgcache_fill_lock(const char *shared, const char *fill, uint64_t h, char *work,
			    size_t size, int *lfd, cae_error *err)
{
	if (cae__pkgcache_filled(shared, h, false))
		return 0;
	char lock[PATH_MAX + 40];
	snprintf(lock, sizeof(lock), "%s/.lock", fill);
	*lfd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (*lfd < 0 || flock(*lfd, LOCK_EX) < 0)
		return cae_error_set(err, -errno, "cannot lock %s: %s", lock, strerror(errno));
	if (cae__pkgcache_filled(shared, h, false))
		return 0; /* another prepare filled it meanwhile */
	snprintf(work, size, "%s/work", fill);
	(void)cae__rm_rf(work);
	return 1;
}

static int write_text(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX + 300];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return cae__write_file_atomic(AT_FDCWD, path, text, strlen(text), 0644, false);
}

/* A fill takes modules from proxies only, never from their version control systems
 * ("direct": the go.mod's module paths would name the hosts cae's fill reaches, and run
 * git or another VCS client against them): what is not on a proxy is the task's own to
 * fetch, under its network policy. */
#define FILL_VCS "GOVCS=*:off"

/* `go mod download` in work/src (go.mod and go.sum there), into work/mod, from the shared
 * proxy first, then the operator's; its output's end in err when it fails. */
static int host_download(const char *shared, const char *work, void *ctx, cae_error *err)
{
	(void)ctx;
	char src[PATH_MAX + 100], e_home[PATH_MAX + 100], e_mod[PATH_MAX + 100],
	    e_cache[PATH_MAX + 100], e_proxy[PATH_MAX + 4200];
	snprintf(src, sizeof(src), "%s/src", work);
	snprintf(e_home, sizeof(e_home), "HOME=%s/home", work);
	snprintf(e_mod, sizeof(e_mod), "GOMODCACHE=%s/mod", work);
	snprintf(e_cache, sizeof(e_cache), "GOCACHE=%s/build", work);
	snprintf(e_proxy, sizeof(e_proxy), "GOPROXY=file://%s,%s", shared, operator_proxy());
	const char *envp[16 + ARRAY_SIZE(operator_vars)] = {
	    "PATH=" CAE_SANDBOX_PATH,
	    e_home,
	    e_mod,
	    e_cache,
	    e_proxy,
	    "GOENV=off",
	    "GOFLAGS=-mod=mod -modcacherw",
	    "GOWORK=off",
	    "GOTOOLCHAIN=local",
	    "GO111MODULE=on",
	    "LANG=C.UTF-8",
	    FILL_VCS,
	};
	size_t n = 12;
	char vars[ARRAY_SIZE(operator_vars)][4200];
	for (size_t i = 0; i < ARRAY_SIZE(operator_vars); i++) {
		const char *v = getenv(operator_vars[i]);
		if (v && strlen(v) < 4000) {
			snprintf(vars[i], sizeof(vars[i]), "%s=%s", operator_vars[i], v);
			envp[n++] = vars[i];
		}
	}
	envp[n] = NULL;
	const char *argv[] = {"go", "mod", "download", NULL};
	cae_run_spec spec = {.argv = argv,
			     .envp = envp,
			     .cwd = src,
			     .timeout_ms = FILL_TIMEOUT_MS,
			     .max_stdout = 64 << 10,
			     .cancel_fd = -1};
	cae_run_result res = {0};
	int r = cae_runner_run(&spec, &res, err);
	if (r < 0)
		return r;
	if (res.exit_code != 0) {
		size_t l = res.err ? strlen(res.err) : 0;
		r = cae_error_set(
		    err, -EIO, "go mod download (filling the shared Go module cache): exit %d: %s",
		    res.exit_code, l ? res.err + (l > 600 ? l - 600 : 0) : "");
	}
	cae_run_result_clear(&res);
	return r;
}

/* How a fill downloads: into work/mod from work/src (go.mod, go.sum), shared first. */
typedef int (*download_fn)(const char *shared, const char *work, void *ctx, cae_error *err);

static int fill_with(const cae_config *cfg, const char *gomod, const char *gosum,
		     download_fn download, void *ctx, cae_error *err)
{
	char shared[PATH_MAX], fill[PATH_MAX], work[PATH_MAX + 40];
	int r = cae__pkgcache_fill_dirs(cfg, "go-mod", "go-mod-fill", shared, fill, err);
	if (r <= 0)
		return r;
	/* done once per go.mod and go.sum */
	uint64_t h = cae__pkgcache_fnv1a(0xcbf29ce484222325ULL, "cae-go-mod 1\n", 13);
	h = cae__pkgcache_fnv1a(h, gomod, strlen(gomod) + 1);
	h = cae__pkgcache_fnv1a(h, gosum ? gosum : "", gosum ? strlen(gosum) + 1 : 0);
	_cleanup_close_ int lfd = -1;
	if ((r = cae__pkgcache_fill_lock(shared, fill, h, work, sizeof(work), &lfd, err)) <= 0)
		return r;
	char src[PATH_MAX + 60], home[PATH_MAX + 60], dl[PATH_MAX + 60];
	snprintf(src, sizeof(src), "%s/src", work);
	snprintf(home, sizeof(home), "%s/home", work);
	snprintf(dl, sizeof(dl), "%s/mod/cache/download", work);
	if ((r = cae__mkdir_p(src, 0700)) < 0 || (r = cae__mkdir_p(home, 0700)) < 0 ||
	    (r = write_text(src, "go.mod", gomod)) < 0 ||
	    (gosum && (r = write_text(src, "go.sum", gosum)) < 0))
		return cae_error_set(err, r, "cannot make %s: %s", work, strerror(-r));
	int dr = download(shared, work, ctx, err);
	/* what was downloaded and checked is published, even when some module was not */
	int s = open(dl, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int t = open(shared, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (s >= 0 && t >= 0) {
		r = publish_tree(s, t, 0);
	} else {
		r = s < 0 && errno == ENOENT ? 0 : -errno;
		if (s >= 0)
			close(s);
		if (t >= 0)
			close(t);
	}
	(void)cae__rm_rf(work);
	if (r < 0)
		return cae_error_set(err, r, "cannot publish the Go modules into %s: %s", shared,
				     strerror(-r));
	if (dr < 0)
		return dr;
	(void)cae__pkgcache_filled(shared, h, true);
	return 1;
}

/* A go on the host (the sandbox's PATH). */
static bool host_go(void)
{
	const char *penv[] = {"PATH=" CAE_SANDBOX_PATH, NULL};
	_cleanup_free_ char *prog = NULL;
	return cae_runner_find_program("go", penv, &prog) == 0;
}

int cae__pkgcache_gomod_fill(const cae_config *cfg, const char *gomod, const char *gosum,
			     cae_error *err)
{
	if (!cfg->command_executor.package_cache.enabled || !host_go())
		return 0;
	return fill_with(cfg, gomod, gosum, host_download, NULL, err);
}

int cae__pkgcache_manifest(const char *project, const char *name, char **out)
{
	*out = NULL;
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/%s", project, name);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return -EINVAL;
	size_t len = 0;
	return cae__read_fd(fd, MANIFEST_MAX, out, &len);
}

int cae__pkgcache_gomod_fill_project(const cae_config *cfg, const char *project, cae_error *err)
{
	if (!cfg->command_executor.package_cache.enabled)
		return 0;
	_cleanup_free_ char *mod = NULL, *sum = NULL;
	int r = cae__pkgcache_manifest(project, "go.mod", &mod);
	if (r == 0 && mod)
		r = cae__pkgcache_manifest(project, "go.sum", &sum);
	if (r < 0)
		return cae_error_set(err, r, "cannot read the project's go.mod or go.sum: %s",
				     strerror(-r));
	return mod ? cae__pkgcache_gomod_fill(cfg, mod, sum, err) : 0;
}

int cae__pkgcache_container_manifest(cae_prepare *p, const char *name, char **out, cae_error *err)
{
	*out = NULL;
	char script[200];
	snprintf(script, sizeof(script),
		 "f=/workspace/project/%s; [ -f \"$f\" ] && [ ! -L \"$f\" ] || exit 3; cat \"$f\"",
		 name);
	const char *argv[] = {"sh", "-c", script, NULL};
	/* (the workspace: kubernetes confines a command's working directory beneath it) */
	cae_exec_request req = {.argv = argv,
				.cwd = "/workspace",
				.timeout_ms = 60000,
				.max_stdout = MANIFEST_MAX,
				.max_stderr = 8192,
				.cancel_fd = -1};
	cae_run_result res = {0};
	int r = p->exec(p->exec_ctx, &req, &res, err);
	if (r < 0)
		return r;
	if (res.exit_code == 0 && res.out && !res.out_truncated) {
		*out = res.out;
		res.out = NULL;
	}
	cae_run_result_clear(&res);
	return 0;
}

/* ---- the fill in a container (docker, no go on the host) ---- */

bool cae__pkgcache_gomod_in_container;

#define FILL_INSIDE "/fill"

struct container_fill {
	cae_docker *d;
	const char *image; /* its id */
};

/* `go mod download` in a container of the image (its go, its user 1000, the host's network
 * to reach the operator's proxy, no capabilities), work bound at FILL_INSIDE and the shared
 * proxy read-only at CAE_PKGCACHE_GO_MOD: nothing of a task's but the two files. */
static int container_download(const char *shared, const char *work, void *ctx, cae_error *err)
{
	struct container_fill *cf = ctx;
	static const char *const dirs[] = {"", "/src", "/src/go.mod", "/src/go.sum", "/home"};
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		char p[PATH_MAX + 40];
		snprintf(p, sizeof(p), "%s%s", work, dirs[i]);
		if (lchown(p, 1000, 1000) < 0 && errno != ENOENT)
			return cae_error_set(err, -errno, "cannot give %s to uid 1000: %s", p,
					     strerror(errno));
	}
	char b_work[PATH_MAX + 40], b_shared[PATH_MAX + 40], e_proxy[4200];
	snprintf(b_work, sizeof(b_work), "%s:" FILL_INSIDE, work);
	snprintf(b_shared, sizeof(b_shared), "%s:" CAE_PKGCACHE_GO_MOD ":ro", shared);
	snprintf(e_proxy, sizeof(e_proxy), "GOPROXY=file://" CAE_PKGCACHE_GO_MOD ",%s",
		 operator_proxy());
	json_t *env = json_pack("[s,s,s,s,s,s,s,s,s,s,s]", "HOME=" FILL_INSIDE "/home",
				"GOMODCACHE=" FILL_INSIDE "/mod", "GOCACHE=" FILL_INSIDE "/build",
				e_proxy, "GOENV=off", "GOFLAGS=-mod=mod -modcacherw", "GOWORK=off",
				"GOTOOLCHAIN=local", "GO111MODULE=on", "LANG=C.UTF-8", FILL_VCS);
	cae__pkgcache_env_append(env, operator_vars, ARRAY_SIZE(operator_vars));
	json_t *body = env ? json_pack("{s:s, s:s, s:[s,s,s], s:s, s:o, s:{s:s}, s:{s:[s,s], s:s, "
				       "s:[s], s:[s]}}",
				       "Image", cf->image, "User", "1000:1000", "Cmd", "sh", "-c",
				       "cd " FILL_INSIDE "/src && go mod download", "WorkingDir",
				       "/", "Env", env, "Labels", "cae.pkgcache_fill", "go-mod",
				       "HostConfig", "Binds", b_work, b_shared, "NetworkMode",
				       "host", "CapDrop", "ALL", "SecurityOpt", "no-new-privileges")
			   : NULL;
	int code;
	return cae__pkgcache_docker_fill(
	    cf->d, "cae-gomodfill", work, cf->image, body, FILL_TIMEOUT_MS,
	    "go mod download (filling the shared Go module cache)", &code, err);
}

int cae__pkgcache_gomod_docker(cae_prepare *p, cae_docker *d, const char *container, cae_error *err)
{
	if (!p->b->cfg->command_executor.package_cache.enabled)
		return 0;
	_cleanup_free_ char *mod = NULL, *sum = NULL;
	int r = cae__pkgcache_container_manifest(p, "go.mod", &mod, err);
	if (r == 0 && mod)
		r = cae__pkgcache_container_manifest(p, "go.sum", &sum, err);
	if (r < 0)
		return r;
	if (!mod)
		return 0;
	if (host_go() && !cae__pkgcache_gomod_in_container)
		return fill_with(p->b->cfg, mod, sum, host_download, NULL, err);
	/* the image's go: the image's id, from the container */
	char key[80];
	if ((r = cae__pkgcache_image_key(d, container, key, sizeof(key), err)) < 0)
		return r;
	struct container_fill cf = {.d = d, .image = key};
	return fill_with(p->b->cfg, mod, sum, container_download, &cf, err);
}

int cae__pkgcache_gomod_pod(cae_prepare *p, cae_error *err)
{
	if (!p->b->cfg->command_executor.package_cache.enabled || !host_go())
		return 0;
	_cleanup_free_ char *mod = NULL, *sum = NULL;
	int r = cae__pkgcache_container_manifest(p, "go.mod", &mod, err);
	if (r == 0 && mod)
		r = cae__pkgcache_container_manifest(p, "go.sum", &sum, err);
	if (r < 0 || !mod)
		return r;
	return fill_with(p->b->cfg, mod, sum, host_download, NULL, err);
}
